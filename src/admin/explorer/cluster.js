// ferrobus explorer: the cluster card, shown on a cluster member (the poll's `cluster`, the
// leader's view): one row per node with its role, how far its log is and what it lacks, and
// the membership and leadership actions of `ferrobus cluster` (docs/cluster.md).

import { api } from "./client.js";
import { $, element, setText, syncRows } from "./format.js";
import { guarded, poll, showNotice } from "./app.js";

/** The nodes of the leader's view, voters then learners, with each one's progress. */
function nodesOf(cluster) {
  const progress = new Map((cluster.members || []).map((member) => [member.id, member]));
  const row = (id, kind) => ({
    id,
    role: id === cluster.leader ? "leader" : kind,
    matched: progress.get(id)?.matched,
    lag: progress.get(id)?.lag,
  });
  return [...(cluster.voters || []).map((id) => row(id, "voter")), ...(cluster.learners || []).map((id) => row(id, "learner"))];
}

export function renderClusterCard(cluster) {
  const card = $("#cluster-card");
  if (!cluster) {
    card.hidden = true;
    return;
  }
  card.hidden = false;
  setText($("#cluster-summary"), `node ${cluster.leader} leads · term ${cluster.term} · last index ${cluster.last_index ?? "-"}`);
  syncRows(
    $("#cluster-nodes tbody"),
    nodesOf(cluster),
    (node) => node.id,
    (node) => {
      const row = element("tr");
      for (const className of ["", "", "num", "num", "cluster-actions"]) row.append(element("td", className ? { className } : {}));
      const lead = element("button", { type: "button", "data-cluster-action": "leader", "data-node": String(node.id) }, "Make leader");
      const remove = element("button", { type: "button", "data-cluster-action": "remove", "data-node": String(node.id) }, "Remove");
      row.cells[4].append(lead, remove);
      return row;
    },
    (row, node) => {
      setText(row.cells[0], `node ${node.id}`);
      setText(row.cells[1], node.role);
      setText(row.cells[2], node.matched ?? "-");
      setText(row.cells[3], node.lag ?? "-");
      const [lead, remove] = row.cells[4].querySelectorAll("button");
      // The leadership goes to a voter; the leader itself is neither made leader nor removed.
      lead.hidden = node.role !== "voter";
      remove.hidden = node.role === "leader";
    },
  );
}

async function act(button) {
  const node = Number(button.dataset.node);
  if (button.dataset.clusterAction === "leader") {
    const answer = await api("POST", "cluster/leader", { body: { id: node } });
    showNotice(answer.message || `Node ${node} takes the leadership.`);
  } else {
    await api("POST", "cluster/remove", { body: { id: node } });
    showNotice(`Node ${node} is removed from the cluster.`);
  }
  await poll();
}

export function wireCluster() {
  $("#cluster-nodes").addEventListener("click", (event) => {
    const button = event.target.closest("button[data-cluster-action]");
    if (button) guarded(button, () => act(button));
  });
  $("#cluster-add").addEventListener("submit", (event) => {
    event.preventDefault();
    const button = $("#cluster-add-button");
    guarded(button, async () => {
      const id = Number($("#cluster-add-id").value);
      const address = $("#cluster-add-address").value.trim();
      await api("POST", "cluster/add", { body: { id, address } });
      showNotice(`Node ${id} is a voting member of the cluster.`);
      $("#cluster-add-id").value = "";
      $("#cluster-add-address").value = "";
      await poll();
    });
  });
}
