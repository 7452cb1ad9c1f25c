// ferrobus explorer: the selected entity's message list (search, paging, selection), a
// message's detail, and actions on messages: settle, resubmit, purge and send.

import { queryString, api } from "./client.js";
import { $, $$, plural, formatBytes, formatTime, valueText, setText, element, syncRows } from "./format.js";
import {
  QUEUE_LABELS,
  state,
  showError,
  showNotice,
  guarded,
  poll,
  selectedEntity,
  isTopic,
  currentQueue,
} from "./app.js";

const PAGE_SIZE = 50;
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

// ---------------------------------------------------------------- messages

export async function loadMessages({ append = false, silent = false } = {}) {
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

export function renderMessages() {
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

export function updateSelectionControls() {
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

export function resetMessageList() {
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

export function closeMessage() {
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

export function onAction(event) {
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

export function resubmit(button, all) {
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

export function purge(event) {
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

export function send(event) {
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
