"use strict";
// The site's addition to Django admin's scripts, on every admin page (base_site.html): a name
// for each form control that the admin's own markup leaves without one (WCAG 2.1 1.3.1 and
// 4.1.2; docs/accessibility.md). Names point at text already on the page (aria-labelledby), so
// they are in the page's language:
// - the two halves of a date-time field: its "Date:" and "Time:" become labels, and the field's
//   own label (or its column's heading in a table of inline rows) comes first;
// - the other controls in a table of inline rows: their column's heading;
// - the autocomplete widget (select2): the select's label, then the chosen value.
// Rows added later ("Add another") and widgets set up after the page loaded are named as they
// appear. The hidden template row of an inline table is left alone: its copies are named.
(function () {
  let count = 0;

  function idOf(element) {
    if (!element.id) {
      count += 1;
      element.id = "gw-name-" + count;
    }
    return element.id;
  }

  function labelledBy(control, parts) {
    const ids = parts.filter(Boolean).map(idOf);
    if (ids.length) control.setAttribute("aria-labelledby", ids.join(" "));
  }

  function skipped(control) {
    return control.hasAttribute("aria-label") || control.hasAttribute("aria-labelledby") ||
      control.closest(".empty-form") !== null;
  }

  // What names a control's field: its own <label for>, the column's heading in a table of
  // inline rows, or the label of the form row's field (a date-time's label has no `for`).
  function fieldLabel(control) {
    if (control.labels && control.labels.length) return control.labels[0];
    const cell = control.closest("td");
    if (cell && cell.closest(".tabular")) {
      const head = cell.closest("table").tHead;
      return head ? head.rows[0].cells[cell.cellIndex] : null;
    }
    const box = control.closest(".flex-container");
    return box ? box.querySelector(":scope > label") : null;
  }

  function nameDateTimes() {
    document.querySelectorAll("p.datetime input.vDateField, p.datetime input.vTimeField")
      .forEach(function (input) {
        if (skipped(input)) return;
        const field = fieldLabel(input);
        let own = null;
        const text = input.previousSibling;
        if (text && text.nodeType === Node.TEXT_NODE && text.textContent.trim()) {
          own = document.createElement("label");
          own.className = "gw-part-label";
          own.htmlFor = idOf(input);
          own.textContent = text.textContent.trim();
          text.replaceWith(" ", own, " ");
        }
        labelledBy(input, [field, own]);
      });
  }

  function nameInlineCells() {
    document.querySelectorAll(
      ".tabular td input:not([type=hidden]), .tabular td select, .tabular td textarea"
    ).forEach(function (control) {
      if (skipped(control) || control.closest("p.datetime") ||
          control.classList.contains("select2-hidden-accessible")) return;
      labelledBy(control, [fieldLabel(control)]);
    });
  }

  function nameAutocompletes() {
    document.querySelectorAll("select.select2-hidden-accessible").forEach(function (select) {
      const box = select.nextElementSibling;
      if (!box || !box.classList.contains("select2") || select.closest(".empty-form")) return;
      const field = fieldLabel(select);
      if (!field) return;
      box.querySelectorAll(".select2-selection[role=combobox]").forEach(function (combo) {
        if (combo.dataset.gwNamed) return;
        const shown = combo.querySelector(".select2-selection__rendered");
        labelledBy(combo, [field, shown]);
        if (shown) labelledBy(shown, [field]);
        combo.dataset.gwNamed = "1";
      });
      box.querySelectorAll("input.select2-search__field").forEach(function (input) {
        if (!skipped(input)) labelledBy(input, [field]);
      });
    });
  }

  function nameAll() {
    nameDateTimes();
    nameInlineCells();
    nameAutocompletes();
  }

  let queued = false;
  function soon() {
    if (queued) return;
    queued = true;
    queueMicrotask(function () {
      queued = false;
      nameAll();
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    nameAll();
    new MutationObserver(soon).observe(document.body, {childList: true, subtree: true});
  });
})();
