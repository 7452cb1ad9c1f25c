// ferrobus explorer: the entity list (counts, rates, topics with their subscriptions), the
// selected entity's detail (definition, rules, sessions), and creating, changing and deleting
// entities.

import { api } from "./client.js";
import { $, formatBytes, formatRate, withParameters, setText, element, syncRows } from "./format.js";
import { state, showError, showNotice, guarded, poll, select, deselect } from "./app.js";

const COUNT_KINDS = ["active", "dead_letter", "scheduled", "deferred", "transfer_dead_letter"];

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
export function updateRates(entities) {
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

export function renderEntities(entities) {
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

export function rerenderEntities() {
  renderEntities(Array.from(state.entities.values()));
}

// ---------------------------------------------------------------- entity detail

export async function loadDetail() {
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

export function markDefinitionDirty() {
  $("#definition-dirty").hidden = !definitionDirty();
}

export function renderDetail(detail, { force = false } = {}) {
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

// ---------------------------------------------------------------- changes

export function createEntity(event) {
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

export function saveEntity(event) {
  event.preventDefault();
  const path = state.selected;
  guarded($("#save-entity"), async () => {
    const detail = await api("PUT", "entity", { query: { path }, body: { definition: $("#entity-definition").value } });
    if (state.selected === path) renderDetail(detail, { force: true });
    showNotice(`Saved ${path}.`);
    await poll();
  });
}

export function deleteEntity(event) {
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
