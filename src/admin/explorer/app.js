// ferrobus explorer: one page over the JSON API under api/ (contract: docs/explorer.md).
// Plain JavaScript, no framework and no build step. The entity list is polled every two
// seconds; tables are updated in place (rows keyed by path or sequence number) so that a
// refresh never replaces a row being clicked or an input being typed into.
"use strict";

(() => {
  const POLL_MS = 2000;
  const PAGE_SIZE = 50;
  const NOTICE_MS = 10000;
  const COUNT_KINDS = ["active", "dead_letter", "scheduled", "deferred", "transfer_dead_letter"];
  const ACTION_VERBS = {
    complete: "Completed",
    receive: "Received and deleted",
    abandon: "Abandoned",
    "dead-letter": "Dead-lettered",
    defer: "Deferred",
    "cancel-scheduled": "Cancelled",
  };
  // System properties in the order a reader looks for them (the API's object has no order).
  const SYSTEM_ORDER = [
    "MessageId", "CorrelationId", "SessionId", "ReplyToSessionId", "Subject", "To", "ReplyTo", "ContentType",
    "SequenceNumber", "State", "EnqueuedTime", "ScheduledEnqueueTime", "DeliveryCount", "LockedUntil", "TimeToLive",
    "ExpiresAt", "EnqueuedSequenceNumber", "DeadLetterSource", "DeadLetterReason", "DeadLetterErrorDescription",
  ];
  const QUEUE_LABELS = { main: "main queue", dlq: "dead-letter queue", "transfer-dlq": "transfer dead-letter queue" };
  const NEW_ENTITY_TEMPLATE =
    '[[queues]]\nname = "new-queue"\nlock_duration = "30s"\nmax_delivery_count = 10\n' +
    "# requires_session = true\n# default_message_time_to_live = \"1d\"\n";

  const $ = (selector, root = document) => root.querySelector(selector);
  const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));

  const state = {
    entities: new Map(), // path -> Entity (last poll)
    previous: new Map(), // path -> { totals, at } of the previous poll
    rates: new Map(), // path -> { in, out } messages per second
    selected: null, // selected entity path
    detail: null, // its EntityDetail
    definitionLoaded: "", // the definition text last loaded into the editor
    tab: "messages",
    search: { property: "", value: "", body: "" }, // applied with #search
    messages: [],
    next: null,
    scanned: 0,
    pages: 0,
    checked: new Set(), // selected sequence numbers
    shown: null, // sequence number whose detail is open
    messageRequest: 0, // increments with every list request; stale answers are dropped
    messagesLoading: false,
    polling: false,
    pollAgain: false,
    pollTimer: null,
    errorSource: null,
    noticeTimer: null,
  };

  // ---------------------------------------------------------------- API

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  function queryString(query) {
    const params = new URLSearchParams();
    for (const [name, value] of Object.entries(query || {})) {
      if (value !== undefined && value !== null && value !== "") params.set(name, String(value));
    }
    const text = params.toString();
    return text ? "?" + text : "";
  }

  async function api(method, route, { query, body } = {}) {
    const init = { method, headers: { Accept: "application/json" }, cache: "no-store", credentials: "same-origin" };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch("api/" + route + queryString(query), init);
    } catch (error) {
      throw new ApiError(0, `The broker does not answer (${error.message}).`);
    }
    const text = await response.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = null;
    }
    if (!response.ok) {
      let message = data && typeof data.error === "string" ? data.error : `${response.status} ${response.statusText}`;
      if (response.status === 401 && !(data && data.error)) message = "401 Unauthorized: the explorer needs a key name and key.";
      throw new ApiError(response.status, message);
    }
    return data;
  }

  // ---------------------------------------------------------------- formatting

  const plural = (count, word) => `${count} ${word}${count === 1 ? "" : "s"}`;

  function formatBytes(bytes) {
    if (bytes === undefined || bytes === null) return "";
    if (bytes < 1024) return `${bytes} B`;
    const units = ["KiB", "MiB", "GiB", "TiB"];
    let value = bytes;
    let unit = -1;
    while (value >= 1024 && unit < units.length - 1) {
      value /= 1024;
      unit += 1;
    }
    return `${value < 10 ? value.toFixed(1) : Math.round(value)} ${units[unit]}`;
  }

  function formatRate(rate) {
    if (rate === undefined || rate === null) return "–";
    if (rate === 0) return "0";
    if (rate < 10) return rate.toFixed(1);
    return String(Math.round(rate));
  }

  const pad = (number, width = 2) => String(number).padStart(width, "0");

  function formatTime(text) {
    if (!text) return "";
    const at = new Date(text);
    if (Number.isNaN(at.getTime())) return text;
    return (
      `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())} ` +
      `${pad(at.getHours())}:${pad(at.getMinutes())}:${pad(at.getSeconds())}`
    );
  }

  function valueText(value) {
    if (value === null || value === undefined) return "";
    if (typeof value === "string") return value;
    return JSON.stringify(value);
  }

  /** A rule's SQL text and, when it has some, the values of its `@parameters`. */
  function withParameters(text, parameters) {
    if (!Array.isArray(parameters) || parameters.length === 0) return text;
    const values = parameters.map((parameter) => `${parameter.name} = ${parameter.value} (${parameter.type})`);
    return `${text} — with ${values.join(", ")}`;
  }

  function setText(element, text) {
    const value = text === undefined || text === null ? "" : String(text);
    if (element.textContent !== value) element.textContent = value;
  }

  function element(tag, attributes = {}, text) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes)) {
      if (name === "className") node.className = value;
      else node.setAttribute(name, value);
    }
    if (text !== undefined) node.textContent = text;
    return node;
  }

  /** Puts one row per item into `tbody`, in order, reusing rows by key. */
  function syncRows(tbody, items, keyOf, create, update) {
    const existing = new Map();
    for (const row of Array.from(tbody.rows)) existing.set(row.dataset.key, row);
    let cursor = tbody.firstElementChild;
    for (const item of items) {
      const key = String(keyOf(item));
      let row = existing.get(key);
      if (row) existing.delete(key);
      else {
        row = create(item);
        row.dataset.key = key;
      }
      update(row, item);
      if (row !== cursor) tbody.insertBefore(row, cursor);
      else cursor = cursor.nextElementSibling;
    }
    for (const row of existing.values()) row.remove();
  }

  // ---------------------------------------------------------------- banners

  function showError(message, source = "action") {
    setText($("#error-text"), message);
    $("#error").hidden = false;
    state.errorSource = source;
    if (source !== "poll") hideNotice();
  }

  function clearError(source) {
    if (source && state.errorSource !== source) return;
    $("#error").hidden = true;
    setText($("#error-text"), "");
    state.errorSource = null;
  }

  function showNotice(message) {
    setText($("#notice"), message);
    $("#notice").hidden = false;
    if (state.errorSource && state.errorSource !== "poll") clearError();
    clearTimeout(state.noticeTimer);
    state.noticeTimer = setTimeout(hideNotice, NOTICE_MS);
  }

  function hideNotice() {
    clearTimeout(state.noticeTimer);
    $("#notice").hidden = true;
  }

  /** Runs a user's request with its button disabled; errors go to #error. */
  async function guarded(button, work) {
    if (button) {
      button.disabled = true;
      button.dataset.busy = "1";
    }
    try {
      await work();
    } catch (error) {
      showError(error.message || String(error));
    } finally {
      if (button) {
        button.disabled = false;
        delete button.dataset.busy;
      }
      updateSelectionControls();
    }
  }

  // ---------------------------------------------------------------- polling

  function schedulePoll() {
    clearTimeout(state.pollTimer);
    state.pollTimer = setTimeout(poll, POLL_MS);
  }

  async function poll() {
    if (state.polling) {
      state.pollAgain = true;
      return;
    }
    state.polling = true;
    clearTimeout(state.pollTimer);
    try {
      const data = await api("GET", "entities");
      updateRates(data.entities || []);
      renderEntities(data.entities || []);
      clearError("poll");
      setText($("#status"), `Updated ${formatTime(new Date().toISOString()).slice(11)} · every ${POLL_MS / 1000} s`);
      $("#status").classList.remove("offline");
      if (state.selected) await refreshSelected();
    } catch (error) {
      showError(error.message, "poll");
      setText($("#status"), error.status === 401 ? "Not authorized" : "Not connected");
      $("#status").classList.add("offline");
    } finally {
      state.polling = false;
      if (state.pollAgain) {
        state.pollAgain = false;
        poll();
      } else {
        schedulePoll();
      }
    }
  }

  /** The selected entity's parts that follow the poll (the ones no input is typed into). */
  async function refreshSelected() {
    const path = state.selected;
    if (!state.entities.has(path)) {
      showNotice(`'${path}' no longer exists.`);
      deselect();
      return;
    }
    renderEntityHeader();
    if (state.tab === "definition") {
      const detail = await api("GET", "entity", { query: { path } });
      if (state.selected === path) renderDetail(detail);
    }
    // The first page of messages follows the broker; pages loaded with #more stay put.
    if (state.tab === "messages" && state.pages <= 1 && !state.messagesLoading && !isTopic()) {
      await loadMessages({ silent: true });
    }
  }

  // ---------------------------------------------------------------- entities

  function orderEntities(entities) {
    const subscriptions = new Map();
    const top = [];
    for (const entity of entities) {
      if (entity.kind === "subscription") {
        const topic = entity.topic || entity.path.split("/")[0];
        if (!subscriptions.has(topic)) subscriptions.set(topic, []);
        subscriptions.get(topic).push(entity);
      } else {
        top.push(entity);
      }
    }
    const byPath = (a, b) => a.path.localeCompare(b.path);
    top.sort(byPath);
    const ordered = [];
    for (const entity of top) {
      ordered.push(entity);
      if (entity.kind === "topic") {
        const children = subscriptions.get(entity.path) || [];
        subscriptions.delete(entity.path);
        children.sort(byPath);
        ordered.push(...children);
      }
    }
    for (const orphans of subscriptions.values()) ordered.push(...orphans.sort(byPath));
    return ordered;
  }

  const RATE_TOTALS = ["sent", "delivered", "completed", "abandoned", "dead_lettered", "expired"];

  /** Messages per second of every total, from its change since the previous poll. */
  function updateRates(entities) {
    const now = performance.now();
    const seen = new Set();
    for (const entity of entities) {
      seen.add(entity.path);
      const totals = entity.totals || {};
      const before = state.previous.get(entity.path);
      if (before) {
        const seconds = (now - before.at) / 1000;
        if (seconds < 0.5) continue; // too close to the last poll: keep measuring from there
        const rates = {};
        let restarted = false;
        for (const name of RATE_TOTALS) {
          const change = (totals[name] || 0) - (before.totals[name] || 0);
          if (change < 0) restarted = true;
          rates[name] = change / seconds;
        }
        if (restarted) state.rates.delete(entity.path);
        else state.rates.set(entity.path, rates);
      }
      state.previous.set(entity.path, { totals, at: now });
    }
    for (const path of Array.from(state.previous.keys())) {
      if (!seen.has(path)) {
        state.previous.delete(path);
        state.rates.delete(path);
      }
    }
  }

  function createEntityRow(entity) {
    const row = element("tr", { "data-testid": "entity-row", "data-path": entity.path, tabindex: "0" });
    const name = element("td", { className: "path" });
    name.append(element("span", { className: "tree", "aria-hidden": "true" }), element("span", { className: "name" }));
    row.append(
      name,
      element("td", { className: "kind" }),
      element("td", { className: "status" }, ""),
    );
    $("td.status", row).append(element("span", { className: "badge" }));
    for (const kind of COUNT_KINDS) row.append(element("td", { className: "num count", "data-testid": `count-${kind}` }));
    row.append(
      element("td", { className: "num size" }),
      element("td", { className: "num rate-in" }),
      element("td", { className: "num rate-out" }),
    );
    row.addEventListener("click", () => select(entity.path));
    row.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        select(entity.path);
      }
    });
    return row;
  }

  function updateEntityRow(row, entity) {
    const isSubscription = entity.kind === "subscription";
    row.classList.toggle("subscription", isSubscription);
    row.classList.toggle("selected", entity.path === state.selected);
    row.setAttribute("aria-selected", entity.path === state.selected ? "true" : "false");
    const name = isSubscription ? entity.path.split("/").pop() : entity.path;
    setText($(".tree", row), isSubscription ? "└" : "");
    setText($(".name", row), name);
    $("td.path", row).title = entity.path + (entity.requires_session ? " (sessions)" : "");
    let kind = entity.kind;
    if (entity.kind === "topic" && entity.subscription_count !== undefined) kind += ` (${entity.subscription_count})`;
    setText($("td.kind", row), kind);
    const badge = $("td.status .badge", row);
    setText(badge, entity.status);
    badge.className = `badge status-${String(entity.status || "").toLowerCase()}`;
    const counts = entity.counts || {};
    for (const kind of COUNT_KINDS) {
      const cell = $(`[data-testid="count-${kind}"]`, row);
      const value = counts[kind] ?? 0;
      setText(cell, value);
      cell.classList.toggle("zero", value === 0);
      cell.classList.toggle("alert", value > 0 && (kind === "dead_letter" || kind === "transfer_dead_letter"));
    }
    setText($("td.size", row), formatBytes(entity.size_bytes));
    const rate = state.rates.get(entity.path);
    setText($("td.rate-in", row), formatRate(rate && rate.sent));
    setText($("td.rate-out", row), formatRate(rate && rate.completed));
    const title = rate
      ? RATE_TOTALS.map((name) => `${name.replace("_", "-")} ${formatRate(rate[name])}/s`).join(" · ")
      : "Rates show from the second refresh on";
    $("td.rate-in", row).title = title;
    $("td.rate-out", row).title = title;
  }

  function renderEntities(entities) {
    state.entities = new Map(entities.map((entity) => [entity.path, entity]));
    const ordered = orderEntities(entities);
    const filter = $("#filter").value.trim().toLowerCase();
    const matches = (entity) => entity.path.toLowerCase().includes(filter);
    const visible = filter
      ? ordered.filter(
          (entity) =>
            matches(entity) ||
            (entity.kind === "topic" && ordered.some((child) => child.topic === entity.path && matches(child))),
        )
      : ordered;
    syncRows($("#entity-rows"), visible, (entity) => entity.path, createEntityRow, updateEntityRow);
    $("#entities-empty").hidden = visible.length > 0;
    setText($("#entities-empty"), entities.length === 0 ? "The broker has no entities yet." : "No entities match the filter.");
  }

  function rerenderEntities() {
    renderEntities(Array.from(state.entities.values()));
  }

  // ---------------------------------------------------------------- selection

  const selectedEntity = () => (state.selected ? state.entities.get(state.selected) : undefined);
  const isTopic = () => selectedEntity()?.kind === "topic";
  const currentQueue = () => $("#queue").value;

  function select(path) {
    const changed = path !== state.selected;
    state.selected = path;
    if (changed) {
      state.detail = null;
      state.definitionLoaded = "";
      $("#entity-definition").value = "";
      markDefinitionDirty();
      state.messages = [];
      state.next = null;
      state.pages = 0;
      state.checked.clear();
      closeMessage();
      $("#purge-form").hidden = true;
      $("#delete-form").hidden = true;
      $("#delete-confirm").value = "";
      $("#purge-confirm").value = "";
      $("#message-rows").replaceChildren();
      history.replaceState(null, "", "#" + encodeURIComponent(path));
    }
    $("#no-selection").hidden = true;
    $("#entity-view").hidden = false;
    rerenderEntities();
    renderEntityHeader();
    loadDetail();
    if (state.tab === "messages") loadMessages();
  }

  function deselect() {
    state.selected = null;
    state.detail = null;
    state.messages = [];
    state.checked.clear();
    closeMessage();
    $("#entity-view").hidden = true;
    $("#no-selection").hidden = false;
    history.replaceState(null, "", location.pathname + location.search);
    rerenderEntities();
  }

  function renderEntityHeader() {
    const entity = selectedEntity();
    if (!entity) return;
    setText($("#entity-path"), entity.path);
    setText($("#entity-kind"), entity.kind);
    setText($("#entity-status"), entity.status);
    $("#entity-status").className = `badge status-${String(entity.status || "").toLowerCase()}`;
    $("#entity-sessions-badge").hidden = !entity.requires_session;
    const topic = entity.kind === "topic";
    $("#topic-note").hidden = !topic;
    $("#search-form").hidden = topic;
    $(".messages-wrap").hidden = topic;
    $(".actions").hidden = topic;
    $(".paging").hidden = topic;
    const queue = currentQueue();
    const deadLetters = queue !== "main";
    $("#panel-messages").classList.toggle("dlq-view", deadLetters);
    $("#messages").classList.toggle("show-reason", deadLetters);
    setText($("#purge-what"), `${entity.path} (${QUEUE_LABELS[queue]})`);
    const target = entity.kind === "subscription" ? entity.topic || entity.path.split("/")[0] : entity.path;
    setText(
      $("#send-target-note"),
      entity.kind === "subscription"
        ? `Sends to the topic '${target}': this subscription gets a copy if its rules match.`
        : `Sends to the ${entity.kind} '${target}'.`,
    );
  }

  // ---------------------------------------------------------------- tabs

  function showTab(name) {
    state.tab = name;
    for (const tab of $$('[role="tab"]')) {
      const active = tab.id === `tab-${name}`;
      tab.setAttribute("aria-selected", active ? "true" : "false");
      tab.tabIndex = active ? 0 : -1;
      $("#" + tab.getAttribute("aria-controls")).hidden = !active;
    }
    if (!state.selected) return;
    if (name === "messages") loadMessages();
    if (name === "definition") loadDetail();
  }

  // ---------------------------------------------------------------- entity detail

  async function loadDetail() {
    const path = state.selected;
    try {
      const detail = await api("GET", "entity", { query: { path } });
      if (state.selected === path) renderDetail(detail);
    } catch (error) {
      if (state.selected === path) showError(error.message);
    }
  }

  function definitionDirty() {
    return $("#entity-definition").value !== state.definitionLoaded;
  }

  function markDefinitionDirty() {
    $("#definition-dirty").hidden = !definitionDirty();
  }

  function renderDetail(detail, { force = false } = {}) {
    state.detail = detail;
    const editor = $("#entity-definition");
    const untouched = !definitionDirty() && document.activeElement !== editor;
    if (force || untouched) {
      editor.value = detail.definition || "";
      state.definitionLoaded = editor.value;
    }
    markDefinitionDirty();

    const rules = detail.rules;
    $("#rules-block").hidden = !Array.isArray(rules);
    syncRows(
      $("#rule-rows"),
      rules || [],
      (rule) => rule.name,
      () => {
        const row = element("tr", { "data-testid": "rule-row" });
        row.append(element("td"), element("td", { className: "code" }), element("td", { className: "code" }));
        return row;
      },
      (row, rule) => {
        setText(row.cells[0], rule.name);
        setText(row.cells[1], withParameters(rule.filter, rule.filter_parameters));
        setText(row.cells[2], rule.action ? withParameters(rule.action, rule.action_parameters) : "—");
      },
    );

    const sessions = detail.sessions;
    $("#sessions-block").hidden = !detail.requires_session;
    const list = $("#sessions");
    list.replaceChildren(
      ...(sessions || []).map((session) => element("li", { "data-testid": "session", className: "chip" }, session.id)),
    );
    $("#sessions-empty").hidden = (sessions || []).length > 0;
  }

  // ---------------------------------------------------------------- messages

  async function loadMessages({ append = false, silent = false } = {}) {
    const path = state.selected;
    if (!path || isTopic()) {
      state.messages = [];
      renderMessages();
      return;
    }
    const token = ++state.messageRequest;
    state.messagesLoading = true;
    const query = {
      path,
      queue: currentQueue(),
      state: $("#state").value,
      property: state.search.property,
      value: state.search.property ? state.search.value : "",
      body: state.search.body,
      count: PAGE_SIZE,
    };
    if (append && state.next !== null) query.from = state.next;
    try {
      const data = await api("GET", "messages", { query });
      if (token !== state.messageRequest || state.selected !== path) return;
      const page = data.messages || [];
      if (append) {
        const known = new Set(state.messages.map((message) => message.sequence_number));
        state.messages = state.messages.concat(page.filter((message) => !known.has(message.sequence_number)));
        state.pages += 1;
        state.scanned += data.scanned || 0;
      } else {
        state.messages = page;
        state.pages = 1;
        state.scanned = data.scanned || 0;
      }
      state.next = data.next ?? null;
      renderMessages();
    } catch (error) {
      if (token !== state.messageRequest) return;
      if (silent) throw error;
      showError(error.message);
    } finally {
      if (token === state.messageRequest) state.messagesLoading = false;
    }
  }

  function createMessageRow(message) {
    const seq = message.sequence_number;
    const row = element("tr", { "data-testid": "message-row", "data-seq": String(seq), tabindex: "0" });
    const check = element("td", { className: "check" });
    const box = element("input", { type: "checkbox", className: "select", "aria-label": `Select message ${seq}` });
    box.addEventListener("click", (event) => event.stopPropagation());
    box.addEventListener("change", () => {
      if (box.checked) state.checked.add(seq);
      else state.checked.delete(seq);
      row.classList.toggle("checked", box.checked);
      updateSelectionControls();
    });
    check.append(box);
    check.addEventListener("click", (event) => {
      event.stopPropagation();
      if (event.target !== box) box.click();
    });
    row.append(
      check,
      element("td", { className: "num seq" }),
      element("td", { className: "message-id ellipsis" }),
      element("td", { className: "subject ellipsis" }),
      element("td", { className: "session ellipsis" }),
      element("td", { className: "state" }),
      element("td", { className: "locked" }),
      element("td", { className: "enqueued" }),
      element("td", { className: "num delivery-count" }),
      element("td", { className: "num size" }),
      element("td", { className: "reason ellipsis reason-col", "data-testid": "dead-letter-reason" }),
    );
    row.addEventListener("click", () => openMessage(seq));
    row.addEventListener("keydown", (event) => {
      if (event.key === "Enter") openMessage(seq);
    });
    return row;
  }

  function updateMessageRow(row, message) {
    const seq = message.sequence_number;
    const box = $("input.select", row);
    box.checked = state.checked.has(seq);
    row.classList.toggle("checked", box.checked);
    row.classList.toggle("current", state.shown === seq);
    setText(row.cells[1], seq);
    setText(row.cells[2], message.message_id ?? "");
    row.cells[2].title = message.message_id ?? "";
    setText(row.cells[3], message.subject ?? "");
    row.cells[3].title = message.subject ?? "";
    setText(row.cells[4], message.session_id ?? "");
    row.cells[4].title = message.session_id ?? "";
    let stateText = message.state;
    if (message.state === "scheduled" && message.scheduled_enqueue_time) {
      stateText = `scheduled ${formatTime(message.scheduled_enqueue_time).slice(5, 16)}`;
    }
    setText(row.cells[5], stateText);
    row.cells[5].className = `state state-${message.state}`;
    row.cells[5].title = message.scheduled_enqueue_time ? `Scheduled for ${message.scheduled_enqueue_time}` : "";
    setText(row.cells[6], message.locked ? "locked" : "");
    setText(row.cells[7], formatTime(message.enqueued_time));
    row.cells[7].title = message.enqueued_time || "";
    setText(row.cells[8], message.delivery_count);
    setText(row.cells[9], formatBytes(message.size));
    setText(row.cells[10], message.dead_letter_reason ?? "");
    row.cells[10].title = message.dead_letter_reason ?? "";
  }

  function renderMessages() {
    const present = new Set(state.messages.map((message) => message.sequence_number));
    for (const seq of Array.from(state.checked)) if (!present.has(seq)) state.checked.delete(seq);
    syncRows(
      $("#message-rows"),
      state.messages,
      (message) => message.sequence_number,
      createMessageRow,
      updateMessageRow,
    );
    const count = state.messages.length;
    $("#messages-empty").hidden = count > 0;
    const searching = state.search.property || state.search.body || $("#state").value !== "all";
    setText(
      $("#messages-empty"),
      searching ? "No message matches the search." : `The ${QUEUE_LABELS[currentQueue()]} is empty.`,
    );
    let info = count ? `${plural(count, "message")} shown` : "";
    if (searching && state.scanned) info += `${info ? " · " : ""}${state.scanned} scanned`;
    if (state.next !== null) info += `${info ? " · " : ""}more after #${state.next - 1}`;
    setText($("#messages-info"), info);
    $("#more").hidden = state.next === null;
    updateSelectionControls();
  }

  function updateSelectionControls() {
    const selected = state.checked.size;
    const listed = state.messages.length;
    setText($("#selection-count"), `${selected} selected`);
    const all = $("#select-all");
    all.checked = listed > 0 && selected === listed;
    all.indeterminate = selected > 0 && selected < listed;
    all.disabled = listed === 0;
    for (const button of $$("[data-action], #resubmit-selected")) {
      if (!button.dataset.busy) button.disabled = selected === 0;
    }
  }

  function resetMessageList() {
    state.next = null;
    state.pages = 0;
    state.checked.clear();
    closeMessage();
    loadMessages();
  }

  // ---------------------------------------------------------------- message detail

  async function openMessage(seq) {
    const path = state.selected;
    const queue = currentQueue();
    state.shown = seq;
    for (const row of $$("#message-rows tr")) row.classList.toggle("current", row.dataset.seq === String(seq));
    try {
      const detail = await api("GET", "message", { query: { path, queue, seq } });
      if (state.shown !== seq || state.selected !== path) return;
      renderMessage(detail, path, queue);
    } catch (error) {
      showError(error.message);
    }
  }

  function fillTable(table, entries, emptyText) {
    const body = table.tBodies[0];
    if (entries.length === 0) {
      const row = element("tr");
      row.append(element("td", { colspan: "2", className: "muted" }, emptyText));
      body.replaceChildren(row);
      return;
    }
    body.replaceChildren(
      ...entries.map(([name, value]) => {
        const row = element("tr");
        const cell = element("td", { className: "value" }, valueText(value));
        if (value !== null && typeof value !== "string") cell.classList.add(`type-${typeof value}`);
        row.append(element("th", { scope: "row" }, name), cell);
        return row;
      }),
    );
  }

  function renderMessage(detail, path, queue) {
    const seq = detail.sequence_number;
    setText($("#message-seq"), `#${seq}`);
    const rank = (name) => {
      const index = SYSTEM_ORDER.indexOf(name);
      return index < 0 ? SYSTEM_ORDER.length : index;
    };
    const system = Object.entries(detail.system || {}).sort(
      ([a], [b]) => rank(a) - rank(b) || a.localeCompare(b),
    );
    fillTable($("#message-system"), system, "None");
    fillTable($("#message-properties"), Object.entries(detail.properties || {}), "No application properties");
    const body = detail.body || {};
    setText($("#message-body"), body.text ?? "");
    $("#message-body").className = `body-${body.kind || "text"}`;
    setText($("#message-body-kind"), body.kind ? `${body.kind}, ${formatBytes(body.size ?? 0)}` : "");
    const link = $("#message-download");
    link.href = "api/message/body" + queryString({ path, queue, seq });
    link.setAttribute("download", `message-${seq}.bin`);
    $("#message-detail").hidden = false;
  }

  function closeMessage() {
    state.shown = null;
    $("#message-detail").hidden = true;
    for (const row of $$("#message-rows tr.current")) row.classList.remove("current");
  }

  // ---------------------------------------------------------------- actions

  async function afterChange(message) {
    if (message) showNotice(message);
    state.checked.clear();
    closeMessage();
    await Promise.all([loadMessages(), poll()]);
  }

  function onAction(event) {
    const button = event.currentTarget;
    const action = button.dataset.action;
    const sequenceNumbers = Array.from(state.checked).sort((a, b) => a - b);
    if (!sequenceNumbers.length) return;
    guarded(button, async () => {
      const data = await api("POST", "action", {
        body: { path: state.selected, queue: currentQueue(), sequence_numbers: sequenceNumbers, action },
      });
      await afterChange(`${ACTION_VERBS[action] || action} ${plural(data.done ?? 0, "message")}.`);
    });
  }

  function resubmit(button, all) {
    const target = $("#resubmit-target").value.trim();
    const body = { path: state.selected, queue: currentQueue() };
    if (all) body.all = true;
    else {
      body.sequence_numbers = Array.from(state.checked).sort((a, b) => a - b);
      if (!body.sequence_numbers.length) return;
    }
    if (target) body.target = target;
    guarded(button, async () => {
      const data = await api("POST", "resubmit", { body });
      let text = `Resubmitted ${plural(data.resubmitted ?? 0, "message")} to ${data.target}.`;
      if (all && data.resubmitted >= 10000) text += " More may remain: resubmit all again.";
      await afterChange(text);
    });
  }

  function purge(event) {
    event.preventDefault();
    const entered = $("#purge-confirm").value;
    const queue = currentQueue();
    guarded($("#purge-go"), async () => {
      const data = await api("POST", "purge", { body: { path: state.selected, queue, confirm: entered } });
      $("#purge-form").hidden = true;
      $("#purge-confirm").value = "";
      await afterChange(`Purged ${plural(data.deleted ?? 0, "message")} from ${state.selected} (${QUEUE_LABELS[queue]}).`);
    });
  }

  function send(event) {
    event.preventDefault();
    const entity = selectedEntity();
    if (!entity) return;
    guarded($("#send"), async () => {
      const request = {
        path: entity.kind === "subscription" ? entity.topic || entity.path.split("/")[0] : entity.path,
        body: $("#send-body").value,
      };
      const contentType = $("#send-content-type").value.trim();
      if (contentType) request.content_type = contentType;
      const propertiesText = $("#send-properties").value.trim();
      if (propertiesText) {
        let properties;
        try {
          properties = JSON.parse(propertiesText);
        } catch (error) {
          throw new Error(`Application properties are not valid JSON: ${error.message}`);
        }
        if (properties === null || typeof properties !== "object" || Array.isArray(properties)) {
          throw new Error('Application properties must be a JSON object, like {"region": "eu"}.');
        }
        request.properties = properties;
      }
      const sessionId = $("#send-session-id").value.trim();
      if (sessionId) request.session_id = sessionId;
      const messageId = $("#send-message-id").value.trim();
      if (messageId) request.message_id = messageId;
      const ttl = $("#send-ttl").value.trim();
      if (ttl) {
        const seconds = Number(ttl);
        if (!(seconds > 0)) throw new Error("Time to live must be a positive number of seconds.");
        request.ttl_seconds = seconds;
      }
      const scheduled = $("#send-scheduled").value;
      if (scheduled) {
        const at = new Date(scheduled);
        if (Number.isNaN(at.getTime())) throw new Error(`'${scheduled}' is not a date and time.`);
        request.scheduled_enqueue_time = at.toISOString();
      }
      const countText = $("#send-count").value.trim();
      const count = countText ? Number(countText) : 1;
      if (!Number.isInteger(count) || count < 1 || count > 1000) throw new Error("Count must be a whole number from 1 to 1000.");
      request.count = count;
      const data = await api("POST", "send", { body: request });
      let text = `Sent ${plural(data.sent ?? count, "message")} to ${request.path}.`;
      const numbers = data.sequence_numbers || [];
      if (numbers.length) {
        const shown = numbers.slice(0, 10).join(", ") + (numbers.length > 10 ? ", …" : "");
        text += request.scheduled_enqueue_time ? ` Scheduled as ${shown}.` : ` Sequence numbers ${shown}.`;
      }
      showNotice(text);
      await poll();
    });
  }

  function createEntity(event) {
    event.preventDefault();
    guarded($("#create"), async () => {
      const data = await api("POST", "entities", { body: { definition: $("#definition").value } });
      $("#new-entity-form").hidden = true;
      const paths = data.paths && data.paths.length ? data.paths : [data.path];
      showNotice(`Created ${paths.join(", ")}.`);
      await poll();
      const last = paths[paths.length - 1];
      if (state.entities.has(last)) select(last);
    });
  }

  function saveEntity(event) {
    event.preventDefault();
    const path = state.selected;
    guarded($("#save-entity"), async () => {
      const detail = await api("PUT", "entity", { query: { path }, body: { definition: $("#entity-definition").value } });
      if (state.selected === path) renderDetail(detail, { force: true });
      showNotice(`Saved ${path}.`);
      await poll();
    });
  }

  function deleteEntity(event) {
    event.preventDefault();
    const path = state.selected;
    const entered = $("#delete-confirm").value.trim().replace(/^\/+|\/+$/g, "");
    if (entered.toLowerCase() !== path.toLowerCase()) {
      showError(`To delete '${path}', type its path exactly in the confirmation box.`);
      $("#delete-confirm").focus();
      return;
    }
    guarded($("#delete-go"), async () => {
      const data = await api("DELETE", "entity", { query: { path } });
      showNotice(`Deleted ${data.deleted ?? path}.`);
      deselect();
      await poll();
    });
  }

  // ---------------------------------------------------------------- wiring

  function wire() {
    $("#error-close").addEventListener("click", () => clearError());
    $("#filter").addEventListener("input", rerenderEntities);

    $("#new-entity").addEventListener("click", () => {
      const form = $("#new-entity-form");
      form.hidden = !form.hidden;
      if (!form.hidden) {
        if (!$("#definition").value) $("#definition").value = NEW_ENTITY_TEMPLATE;
        $("#definition").focus();
      }
    });
    $("#create-cancel").addEventListener("click", () => {
      $("#new-entity-form").hidden = true;
    });
    $("#new-entity-form").addEventListener("submit", createEntity);

    const tabs = $$('[role="tab"]');
    for (const tab of tabs) {
      tab.addEventListener("click", () => showTab(tab.id.replace("tab-", "")));
      tab.addEventListener("keydown", (event) => {
        if (event.key !== "ArrowRight" && event.key !== "ArrowLeft") return;
        const index = tabs.indexOf(tab) + (event.key === "ArrowRight" ? 1 : -1);
        const next = tabs[(index + tabs.length) % tabs.length];
        next.focus();
        next.click();
      });
    }

    $("#queue").addEventListener("change", () => {
      renderEntityHeader();
      resetMessageList();
    });
    $("#state").addEventListener("change", resetMessageList);
    $("#search-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const property = $("#search-property").value.trim();
      const value = $("#search-value").value;
      if (value && !property) {
        showError("Give the application property's name to search by its value.");
        return;
      }
      state.search = { property, value, body: $("#search-body").value };
      resetMessageList();
    });
    $("#search-clear").addEventListener("click", () => {
      $("#search-property").value = "";
      $("#search-value").value = "";
      $("#search-body").value = "";
      $("#state").value = "all";
      state.search = { property: "", value: "", body: "" };
      resetMessageList();
    });
    $("#refresh-messages").addEventListener("click", resetMessageList);
    $("#more").addEventListener("click", (event) => guarded(event.currentTarget, () => loadMessages({ append: true })));

    $("#select-all").addEventListener("change", (event) => {
      if (event.currentTarget.checked) for (const message of state.messages) state.checked.add(message.sequence_number);
      else state.checked.clear();
      renderMessages();
    });

    for (const button of $$("[data-action]")) button.addEventListener("click", onAction);
    $("#resubmit-selected").addEventListener("click", (event) => resubmit(event.currentTarget, false));
    $("#resubmit-all").addEventListener("click", (event) => resubmit(event.currentTarget, true));

    $("#purge").addEventListener("click", () => {
      const form = $("#purge-form");
      form.hidden = !form.hidden;
      if (!form.hidden) $("#purge-confirm").focus();
    });
    $("#purge-cancel").addEventListener("click", () => {
      $("#purge-form").hidden = true;
      $("#purge-confirm").value = "";
    });
    $("#purge-form").addEventListener("submit", purge);

    $("#message-close").addEventListener("click", () => {
      closeMessage();
    });
    document.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && !$("#message-detail").hidden) closeMessage();
    });

    $("#send-form").addEventListener("submit", send);

    $("#entity-definition").addEventListener("input", markDefinitionDirty);
    $("#definition-form").addEventListener("submit", saveEntity);
    $("#reset-entity").addEventListener("click", () => {
      $("#entity-definition").value = state.definitionLoaded;
      markDefinitionDirty();
    });
    $("#delete-entity").addEventListener("click", () => {
      const form = $("#delete-form");
      form.hidden = !form.hidden;
      if (!form.hidden) $("#delete-confirm").focus();
    });
    $("#delete-cancel").addEventListener("click", () => {
      $("#delete-form").hidden = true;
      $("#delete-confirm").value = "";
    });
    $("#delete-form").addEventListener("submit", deleteEntity);
  }

  async function start() {
    wire();
    updateSelectionControls();
    await poll();
    const wanted = decodeURIComponent(location.hash.slice(1));
    if (wanted && state.entities.has(wanted)) select(wanted);
  }

  start();
})();
