/* A budget typed in money, where the institution is chosen in the same form (a superuser's new
   license or course): the currency beside the amount follows the choice
   (licensing/console/money.py, MoneyInput). The admin's select2 widgets announce a choice with
   jQuery's "change", which native listeners do not hear: both are listened to. */
"use strict";
(function () {
  function follow(span) {
    const source = document.getElementById(span.dataset.currencyFrom);
    let currencies = {};
    try {
      currencies = JSON.parse(span.dataset.currencies || "{}");
    } catch (error) {
      return;
    }
    if (!source) return;
    const update = function () {
      span.textContent = currencies[source.value] || "";
    };
    source.addEventListener("change", update);
    if (window.django && window.django.jQuery) window.django.jQuery(source).on("change", update);
    update();
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll(".money-currency[data-currency-from]").forEach(function (span) {
      if (span.dataset.currencyFrom) follow(span);
    });
  });
})();
