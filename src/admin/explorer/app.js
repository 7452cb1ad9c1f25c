// ferrobus explorer: one page over the JSON API under api/ (contract: docs/explorer.md).
// Plain JavaScript modules, no framework and no build step. The entity list is polled every
// two seconds; tables are updated in place (rows keyed by path or sequence number) so that a
// refresh never replaces a row being clicked or an input being typed into.
//
// This module is the page: its state, the banners, polling, the selected entity, the tabs and
// the wiring of every control. entities.js draws the entity list and an entity's detail and
// makes changes to entities; messages.js draws the message list and a message's detail and
// acts on messages; client.js calls the API; format.js formats values and builds elements.
// entities.js and messages.js import the state and banners from here (a cycle through this
// module): they only declare at load, and the page starts once every module is loaded.

import { api } from "./client.js";
import { $, $$, formatTime, setText } from "./format.js";
import {
  updateRates,
  renderEntities,
  rerenderEntities,
  loadDetail,
  markDefinitionDirty,
  renderDetail,
  createEntity,
  saveEntity,
  deleteEntity,
} from "./entities.js";
import {
  loadMessages,
  renderMessages,
  updateSelectionControls,
  resetMessageList,
  closeMessage,
  onAction,
  resubmit,
  purge,
  send,
} from "./messages.js";
import { renderClusterCard, wireCluster } from "./cluster.js";

const POLL_MS = 2000;
const NOTICE_MS = 10000;
export const QUEUE_LABELS = { main: "main queue", dlq: "dead-letter queue", "transfer-dlq": "transfer dead-letter queue" };
const NEW_ENTITY_TEMPLATE =
  '[[queues]]\nname = "new-queue"\nlock_duration = "30s"\nmax_delivery_count = 10\n' +
  "# requires_session = true\n# default_message_time_to_live = \"1d\"\n";

export const state = {
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

// ---------------------------------------------------------------- banners

export function showError(message, source = "action") {
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

export function showNotice(message) {
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
export async function guarded(button, work) {
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

/** A cluster's leader serves the page: which node leads, in which term, each member's lag. */
function renderCluster(cluster) {
  const element = $("#cluster");
  if (!cluster) {
    element.hidden = true;
    return;
  }
  const members = (cluster.members || [])
    .map((member) => `node ${member.id}: ${member.id === cluster.leader ? "leader" : `lag ${member.lag}`}`)
    .join(" · ");
  setText(element, `Cluster: node ${cluster.leader} leads (term ${cluster.term})${members ? ` · ${members}` : ""}`);
  element.hidden = false;
}

export async function poll() {
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
    renderCluster(data.cluster);
    renderClusterCard(data.cluster);
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

// ---------------------------------------------------------------- selection

export const selectedEntity = () => (state.selected ? state.entities.get(state.selected) : undefined);
export const isTopic = () => selectedEntity()?.kind === "topic";
export const currentQueue = () => $("#queue").value;

export function select(path) {
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

export function deselect() {
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
  wireCluster();
  updateSelectionControls();
  await poll();
  const wanted = decodeURIComponent(location.hash.slice(1));
  if (wanted && state.entities.has(wanted)) select(wanted);
}

start();
