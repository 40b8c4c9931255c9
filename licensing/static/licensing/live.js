// The live feed of ledger rows (admin: /admin/licensing/transaction/live/). New rows come over
// the websocket and are prepended; the page keeps at most data-max-rows of them. Every value
// from an event is inserted as text (textContent), never as HTML: model names, reasons and
// license names come from users. The cells match the server's rows in live.html.
(function () {
  "use strict";

  const root = document.getElementById("live-feed");
  if (!root) return;
  const tbody = document.getElementById("live-rows");
  const statusBox = document.getElementById("live-status");
  const statusText = document.getElementById("live-status-text");
  const pauseButton = document.getElementById("live-pause");
  const waitingNote = document.getElementById("live-waiting");
  const emptyNote = document.getElementById("live-empty");
  const maxRows = parseInt(root.dataset.maxRows, 10) || 300;
  const changelistUrl = root.dataset.changelistUrl;
  const socketUrl = (location.protocol === "https:" ? "wss:" : "ws:") + "//" + location.host +
    root.dataset.socketPath;
  // The page's words in its language (live.html's data-text-* attributes; English without).
  const T = Object.assign({
    success: "success", clientError: "client error", denied: "denied", failure: "failure",
    key: "key %(id)s", user: "user %(id)s", tokens: "%(n)s tok", images: "%(n)s img",
    pause: "Pause", resume: "Resume", live: "Live", connecting: "Connecting…",
    reconnecting: "Reconnecting…", reconnectingIn: "Reconnecting in %(n)s s…",
    waitingOne: "1 new row waiting", waitingMany: "%(n)s new rows waiting",
  }, textsOf(root.dataset));
  // Times in the page's time zone (the institution's for its staff), as the server's rows:
  // "2026-11-27 09:30:00" (Sweden's format is ISO's).
  let clock = null;
  try {
    clock = new Intl.DateTimeFormat("sv-SE", {
      timeZone: root.dataset.timeZone || "UTC", year: "numeric", month: "2-digit",
      day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false,
    });
  } catch (e) { clock = null; }  // a zone this browser does not know: UTC as sent
  function localTime(iso) {
    const at = new Date(iso);
    if (clock === null || isNaN(at.getTime())) return iso.slice(0, 10) + " " + iso.slice(11, 19);
    return clock.format(at);
  }
  const OUTCOMES = {
    success: T.success, client_error: T.clientError, denied: T.denied, failure: T.failure,
  };

  function textsOf(data) {
    const texts = {};
    for (const name in data) {
      if (name.startsWith("text")) texts[name.charAt(4).toLowerCase() + name.slice(5)] = data[name];
    }
    return texts;
  }

  function fill(text, values) {
    return text.replace(/%\((\w+)\)s/g, function (_, name) { return String(values[name]); });
  }

  const shown = new Set();
  tbody.querySelectorAll("tr[data-request-id]").forEach(function (tr) {
    shown.add(tr.dataset.requestId);
  });
  let paused = false;
  let waiting = [];
  let attempt = 0;

  function setStatus(state, text) {
    statusBox.className = "live-" + state;
    statusText.textContent = text;
  }

  function cell(tr, text, className) {
    const td = document.createElement("td");
    td.textContent = text;
    if (className) td.className = className;
    tr.appendChild(td);
    return td;
  }

  function holderOf(row) {
    if (row.holder) return row.holder;  // named by the server (licensing/console/live.py)
    const parts = [];
    if (row.api_key_id !== null && row.api_key_id !== undefined) parts.push(fill(T.key, {id: row.api_key_id}));
    if (row.end_user_id !== null && row.end_user_id !== undefined) parts.push(fill(T.user, {id: row.end_user_id}));
    return parts.length ? parts.join(" · ") : "-";
  }

  function usageOf(row) {
    if (row.total_tokens !== null && row.total_tokens !== undefined) return fill(T.tokens, {n: row.total_tokens});
    if (row.images !== null && row.images !== undefined) return fill(T.images, {n: row.images});
    return "-";
  }

  function rowOf(row) {
    const tr = document.createElement("tr");
    const outcome = Object.prototype.hasOwnProperty.call(OUTCOMES, row.outcome) ? row.outcome : "failure";
    tr.className = "live-row live-new live-" + outcome;
    tr.dataset.requestId = row.request_id;
    const iso = String(row.created_at);
    cell(tr, localTime(iso), "live-time").title = iso;
    cell(tr, row.license, "live-wrap");
    cell(tr, holderOf(row), "live-wrap live-holder");  // a name and a key: may wrap
    cell(tr, row.service);
    cell(tr, row.requested_model || "-", "live-wrap live-model");
    cell(tr, row.provider || "-");

    const status = cell(tr, "", "live-status-cell");
    const code = document.createElement("span");
    code.className = "live-code";
    code.textContent = String(row.status_code);
    const label = document.createElement("span");
    label.className = "live-outcome";
    label.textContent = OUTCOMES[outcome];
    status.append(code, " ", label);

    cell(tr, String(row.credits), "live-num");
    cell(tr, usageOf(row), "live-num");
    cell(tr, row.latency_ms + " ms", "live-num");

    const request = cell(tr, "", "live-request");
    const link = document.createElement("a");
    link.href = changelistUrl + "?q=" + encodeURIComponent(row.request_id);
    link.title = row.request_id;
    link.textContent = String(row.request_id).slice(0, 12);
    request.appendChild(link);
    if (row.upstream_id) {
      const upstream = document.createElement("div");
      upstream.className = "live-upstream";
      upstream.title = row.upstream_id;
      upstream.textContent = row.upstream_id;
      request.appendChild(upstream);
    }

    const reason = cell(tr, "", "live-reason");
    if (row.error_code) {
      const strong = document.createElement("strong");
      strong.textContent = row.error_code;
      reason.append(strong, " ", row.error_message || "");
    }
    return tr;
  }

  function show(rows) {
    for (const row of rows) {
      if (!row || typeof row !== "object" || shown.has(row.request_id)) continue;
      shown.add(row.request_id);
      tbody.insertBefore(rowOf(row), tbody.firstChild);
    }
    while (tbody.rows.length > maxRows) {
      const last = tbody.rows[tbody.rows.length - 1];
      shown.delete(last.dataset.requestId);
      last.remove();
    }
    emptyNote.hidden = tbody.rows.length > 0;
  }

  function updateWaiting() {
    waitingNote.hidden = !paused;
    const n = waiting.length;
    waitingNote.textContent = n === 1 ? T.waitingOne : fill(T.waitingMany, {n: n});
  }

  function receive(rows) {
    if (!paused) {
      show(rows);
      return;
    }
    waiting = waiting.concat(rows).slice(-maxRows);
    updateWaiting();
  }

  pauseButton.addEventListener("click", function () {
    paused = !paused;
    pauseButton.textContent = paused ? T.resume : T.pause;
    pauseButton.setAttribute("aria-pressed", String(paused));
    if (!paused) {
      const rows = waiting;
      waiting = [];
      show(rows);
    }
    updateWaiting();
  });

  function connect() {
    setStatus(attempt ? "reconnecting" : "connecting", attempt ? T.reconnecting : T.connecting);
    const socket = new WebSocket(socketUrl);
    socket.addEventListener("open", function () {
      attempt = 0;
      setStatus("live", T.live);
    });
    socket.addEventListener("message", function (event) {
      let message;
      try {
        message = JSON.parse(event.data);
      } catch (error) {
        return;
      }
      if (message && message.type === "rows" && Array.isArray(message.rows)) receive(message.rows);
    });
    socket.addEventListener("close", function () {
      // Back off 1, 2, 4 ... 30 s (with jitter, so that a restarted server is not hit by every
      // page at once); a refused connection (a session that ended) looks the same from here.
      const delay = Math.min(30000, 1000 * Math.pow(2, attempt)) * (0.75 + Math.random() / 2);
      attempt += 1;
      setStatus("reconnecting", fill(T.reconnectingIn, {n: Math.round(delay / 1000)}));
      window.setTimeout(connect, delay);
    });
  }

  connect();
})();
