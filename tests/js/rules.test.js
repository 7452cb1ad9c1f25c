// Subscription rules through the unmodified public @azure/service-bus 7.9.5 ServiceBusRuleManager
// (`client.createRuleManager(topic, subscription)`).
//
// Every test owns the topic named in it, configured in TOPICS below, so tests are independent of
// order. Wire details: /work/shared/protocol/azure-sdk-wire-contract.md §6.4 (add-rule,
// remove-rule, enumerate-rules); behaviour: docs/behaviour.md "Topics, rules, forwarding".

import assert from "node:assert/strict";
import { isServiceBusError } from "@azure/service-bus";
import {
  assertNothingToReceive,
  assertServiceBusError,
  receiveExactly,
  sequenceNumbersOf,
  topicToml,
  useBroker,
  withClient,
} from "./harness.js";

// topic name -> its subscriptions; one topic per test. Every subscription starts with `$Default`.
const TOPICS = {
  "js-rules-default": ["sub"],
  "js-rules-sql": ["filtered", "all"],
  "js-rules-correlation": ["filtered"],
  "js-rules-action": ["filtered"],
  "js-rules-list": ["sub"],
  "js-rules-duplicate": ["sub"],
  "js-rules-delete-missing": ["sub"],
  "js-rules-invalid-sql": ["sub"],
  "js-rules-many": ["sub"],
  "js-rules-pipelined": ["even", "all"],
};

const { broker, brokerTest } = useBroker(
  Object.entries(TOPICS)
    .map(([topic, subscriptions]) => topicToml(topic, subscriptions))
    .join(""),
);

// Management replies must come back promptly; a missing reply fails here instead of as a hang.
const PROMPT_MS = 10_000;

/**
 * All rules of a subscription, through the SDK's paging (listRules() must terminate).
 * SDK quirk, not the broker's: when the very first page is empty, getPage returns undefined and
 * @azure/core-paging yields that non-array "page" as a single `undefined` item. It is dropped here.
 */
async function listAllRules(ruleManager) {
  const rules = [];
  for await (const rule of ruleManager.listRules()) {
    if (rule === undefined) continue;
    rules.push(rule);
  }
  return rules;
}

function byName(rules) {
  return Object.fromEntries(rules.map((rule) => [rule.name, rule]));
}

/** Receives everything a subscription holds (receive-and-delete) and returns the messageIds. */
async function drainIds(client, topic, subscription, expectedCount) {
  const receiver = client.createReceiver(topic, subscription, { receiveMode: "receiveAndDelete" });
  const received = await receiveExactly(receiver, expectedCount);
  await assertNothingToReceive(receiver);
  await receiver.close();
  return received;
}

/** Awaits `promise`, expecting a rejection within `withinMs`; returns the error. */
async function expectRejection(promise, what, withinMs = PROMPT_MS) {
  const started = Date.now();
  let caught;
  try {
    await promise;
  } catch (error) {
    caught = error;
  }
  const elapsed = Date.now() - started;
  assert.ok(caught, `${what}: expected an error, but the operation succeeded`);
  assert.ok(elapsed < withinMs, `${what}: the error took ${elapsed} ms (expected a prompt reply)`);
  return caught;
}

brokerTest("listRules on a fresh subscription returns only $Default with a true filter", async () => {
  // docs/behaviour.md, filters: `$Default`, a true filter, when none is configured; contract §6.4 (true-filter → 1=1)
  const topic = "js-rules-default";
  await withClient(broker.connectionString, async (client) => {
    const rules = await listAllRules(client.createRuleManager(topic, "sub"));
    assert.deepEqual(
      rules.map((rule) => rule.name),
      ["$Default"],
    );
    const [rule] = rules;
    assert.equal(rule.filter.sqlExpression, "1=1");
    assert.equal(rule.action.sqlExpression, undefined, "$Default has no action (empty-rule-action)");
  });
});

brokerTest("an SQL filter rule lets only matching messages reach the subscription", async () => {
  // docs/behaviour.md, filters (SQL grammar, comparison); add-rule / remove-rule at run time
  const topic = "js-rules-sql";
  await withClient(broker.connectionString, async (client) => {
    const rules = client.createRuleManager(topic, "filtered");
    await rules.deleteRule("$Default");
    await rules.createRule("red-only", { sqlExpression: "color = 'red'" });

    const sender = client.createSender(topic);
    await sender.sendMessages([
      { messageId: "red-1", body: 1, applicationProperties: { color: "red" } },
      { messageId: "blue-1", body: 2, applicationProperties: { color: "blue" } },
      { messageId: "none-1", body: 3 },
      { messageId: "red-2", body: 4, applicationProperties: { color: "red", size: 3 } },
    ]);

    const filtered = await drainIds(client, topic, "filtered", 2);
    assert.deepEqual(
      filtered.map((message) => message.messageId),
      ["red-1", "red-2"],
    );
    // The untouched subscription still gets everything (the send itself worked).
    const all = await drainIds(client, topic, "all", 4);
    assert.deepEqual(
      all.map((message) => message.messageId),
      ["red-1", "blue-1", "none-1", "red-2"],
    );
  });
});

brokerTest("a correlation filter rule matches subject and application properties exactly", async () => {
  // docs/behaviour.md, filters: correlation filters match all their set fields exactly
  const topic = "js-rules-correlation";
  await withClient(broker.connectionString, async (client) => {
    const rules = client.createRuleManager(topic, "filtered");
    await rules.deleteRule("$Default");
    await rules.createRule("x-in-eu", { subject: "x", applicationProperties: { region: "eu" } });

    await client.createSender(topic).sendMessages([
      { messageId: "x-eu", body: 1, subject: "x", applicationProperties: { region: "eu" } },
      { messageId: "x-us", body: 2, subject: "x", applicationProperties: { region: "us" } },
      { messageId: "y-eu", body: 3, subject: "y", applicationProperties: { region: "eu" } },
      { messageId: "x-none", body: 4, subject: "x" },
      { messageId: "none-eu", body: 5, applicationProperties: { region: "eu" } },
      { messageId: "x-eu-extra", body: 6, subject: "x", applicationProperties: { region: "eu", other: 1 } },
    ]);

    const received = await drainIds(client, topic, "filtered", 2);
    assert.deepEqual(
      received.map((message) => message.messageId),
      ["x-eu", "x-eu-extra"],
    );
  });
});

brokerTest("a rule with an SQL action delivers a copy with the action applied", async () => {
  // docs/behaviour.md, actions: SET on user properties
  const topic = "js-rules-action";
  await withClient(broker.connectionString, async (client) => {
    const rules = client.createRuleManager(topic, "filtered");
    await rules.deleteRule("$Default");
    await rules.createRule(
      "prioritise",
      { sqlExpression: "kind = 'order'" },
      { sqlExpression: "SET priority = 'high'" },
    );

    await client.createSender(topic).sendMessages([
      { messageId: "order-1", body: "o", applicationProperties: { kind: "order", priority: "low", keep: 7 } },
      { messageId: "note-1", body: "n", applicationProperties: { kind: "note" } },
    ]);

    const [message] = await drainIds(client, topic, "filtered", 1);
    assert.equal(message.messageId, "order-1");
    assert.equal(message.body, "o");
    assert.equal(message.applicationProperties.priority, "high");
    assert.equal(message.applicationProperties.kind, "order");
    assert.equal(message.applicationProperties.keep, 7);
  });
});

brokerTest("listRules reflects creates and deletes with filter types and action expressions", async () => {
  // contract §6.4: enumerate-rules descriptors (sql-filter, correlation-filter, sql-rule-action)
  const topic = "js-rules-list";
  await withClient(broker.connectionString, async (client) => {
    const rules = client.createRuleManager(topic, "sub");
    await rules.createRule("sql-rule", { sqlExpression: "amount > 10" });
    await rules.createRule("corr-rule", {
      correlationId: "corr-1",
      subject: "label-1",
      contentType: "application/json",
      applicationProperties: { region: "eu", tier: 2 },
    });
    await rules.createRule("action-rule", { sqlExpression: "1=1" }, { sqlExpression: "SET priority = 'high'" });

    let listed = byName(await listAllRules(rules));
    assert.deepEqual(Object.keys(listed).sort(), ["$Default", "action-rule", "corr-rule", "sql-rule"]);
    assert.equal(listed["$Default"].filter.sqlExpression, "1=1");
    assert.equal(listed["sql-rule"].filter.sqlExpression, "amount > 10");
    assert.equal(listed["sql-rule"].action.sqlExpression, undefined, "no action → empty-rule-action");

    const correlation = listed["corr-rule"].filter;
    assert.equal(correlation.sqlExpression, undefined, "a correlation filter is listed as one");
    assert.equal(correlation.correlationId, "corr-1");
    assert.equal(correlation.subject, "label-1");
    assert.equal(correlation.contentType, "application/json");
    // Unset fields travel as AMQP null in the described list; the SDK hands them over as null.
    for (const field of ["messageId", "to", "replyTo", "sessionId", "replyToSessionId"]) {
      assert.ok(correlation[field] == null, `unset ${field} should be null/undefined, got ${correlation[field]}`);
    }
    assert.deepEqual(correlation.applicationProperties, { region: "eu", tier: 2 });

    // The broker may normalise the expression's spelling; it must still be the SET action.
    assert.match(listed["action-rule"].action.sqlExpression ?? "", /^SET\s+priority\s*=\s*'high'$/i);
    assert.ok(/^1\s*=\s*1$/.test(listed["action-rule"].filter.sqlExpression ?? ""), "filter of action-rule");

    await rules.deleteRule("sql-rule");
    await rules.deleteRule("$Default");
    listed = byName(await listAllRules(rules));
    assert.deepEqual(Object.keys(listed).sort(), ["action-rule", "corr-rule"]);

    await rules.deleteRule("corr-rule");
    await rules.deleteRule("action-rule");
    assert.deepEqual(await listAllRules(rules), [], "a subscription may have no rules at all");
  });
});

brokerTest("creating a rule whose name exists fails with MessagingEntityAlreadyExists", async () => {
  // contract §6.4 add-rule: duplicate name → com.microsoft:entity-already-exists
  const topic = "js-rules-duplicate";
  await withClient(broker.connectionString, async (client) => {
    const rules = client.createRuleManager(topic, "sub");
    await rules.createRule("twice", { sqlExpression: "a = 1" });
    await assertServiceBusError(rules.createRule("twice", { sqlExpression: "a = 2" }), "MessagingEntityAlreadyExists");
    await assertServiceBusError(rules.createRule("$Default", { sqlExpression: "1=1" }), "MessagingEntityAlreadyExists");

    const listed = byName(await listAllRules(rules));
    assert.deepEqual(Object.keys(listed).sort(), ["$Default", "twice"]);
    assert.equal(listed.twice.filter.sqlExpression, "a = 1", "the first rule is unchanged");
  });
});

brokerTest("deleting a rule that does not exist fails promptly with MessageNotFound", async () => {
  // contract §6.4 remove-rule: missing rule → 404 + com.microsoft:message-not-found (the broker's
  // choice of the two the contract allows; JS maps it to MessageNotFound)
  const topic = "js-rules-delete-missing";
  await withClient(broker.connectionString, async (client) => {
    const rules = client.createRuleManager(topic, "sub");
    const error = await expectRejection(rules.deleteRule("no-such-rule"), "deleteRule of a missing rule");
    assert.ok(isServiceBusError(error), `expected a ServiceBusError, got ${error?.name}: ${error?.message}`);
    assert.equal(error.code, "MessageNotFound", `wrong error code; message: ${error.message}`);
    assert.match(error.message, /no-such-rule/);

    // Deleting twice: the second delete is the missing-rule case too.
    await rules.createRule("once", { sqlExpression: "a = 1" });
    await rules.deleteRule("once");
    const again = await expectRejection(rules.deleteRule("once"), "second deleteRule");
    assert.equal(again.code, "MessageNotFound", `wrong error code; message: ${again.message}`);

    assert.deepEqual(
      (await listAllRules(rules)).map((rule) => rule.name),
      ["$Default"],
    );
  });
});

brokerTest("an invalid SQL filter or action is refused with the position of the error", async () => {
  // docs/behaviour.md, rules at run time: invalid SQL is refused with the position of the error
  const topic = "js-rules-invalid-sql";
  await withClient(broker.connectionString, async (client) => {
    const rules = client.createRuleManager(topic, "sub");
    const filterError = await expectRejection(
      rules.createRule("bad-filter", { sqlExpression: "color = = 1" }),
      "invalid SQL filter",
    );
    assert.ok(isServiceBusError(filterError), `expected a ServiceBusError, got ${filterError?.name}: ${filterError?.message}`);
    assert.equal(filterError.code, "GeneralError", `wrong error code; message: ${filterError.message}`);
    assert.ok(!filterError.retryable, "a syntax error is not retryable");
    // "color = = 1": the second '=' is at column 9.
    assert.match(filterError.message, /column 9\b/, `message: ${filterError.message}`);

    const actionError = await expectRejection(
      rules.createRule("bad-action", { sqlExpression: "1=1" }, { sqlExpression: "SET = 'x'" }),
      "invalid SQL action",
    );
    assert.ok(isServiceBusError(actionError), `expected a ServiceBusError, got ${actionError?.name}: ${actionError?.message}`);
    assert.match(actionError.message, /column \d+/, `message: ${actionError.message}`);

    assert.deepEqual(
      (await listAllRules(rules)).map((rule) => rule.name),
      ["$Default"],
      "refused rules are not added",
    );
  });
});

brokerTest("150 rules are listed completely, also page by page", async () => {
  // contract §6.4 enumerate-rules: skip/top honoured, paging stops on an empty page
  const topic = "js-rules-many";
  await withClient(broker.connectionString, async (client) => {
    const rules = client.createRuleManager(topic, "sub");
    const names = Array.from({ length: 150 }, (_, index) => `rule-${String(index).padStart(3, "0")}`);
    for (const [index, name] of names.entries()) {
      await rules.createRule(name, { sqlExpression: `n = ${index}` });
    }
    const expected = ["$Default", ...names].sort();

    const listed = await listAllRules(rules);
    assert.equal(listed.length, 151, "every rule once");
    assert.deepEqual(
      listed.map((rule) => rule.name).sort(),
      expected,
    );
    for (const rule of listed) {
      if (rule.name === "$Default") continue;
      assert.equal(rule.filter.sqlExpression, `n = ${Number(rule.name.slice(5))}`, `filter of ${rule.name}`);
    }

    const pageSizes = [];
    const paged = [];
    for await (const page of rules.listRules().byPage({ maxPageSize: 40 })) {
      pageSizes.push(page.length);
      paged.push(...page.map((rule) => rule.name));
      assert.ok(pageSizes.length <= 10, "paging does not terminate");
    }
    assert.deepEqual(pageSizes, [40, 40, 40, 31]);
    assert.deepEqual(paged.sort(), expected);
  });
});

brokerTest("sends in flight together to a topic each reach the subscriptions whose rules match, in order", async () => {
  // Issue 16: a connection's consecutive sends to a topic are handed over in one batch, and
  // each subscription gets its copies of all of them at once; each send keeps its own
  // outcome, every subscription the order sent (rules SEQ-1, SEQ-2) and its filter.
  const topic = "js-rules-pipelined";
  const count = 120;
  await withClient(broker.connectionString, async (client) => {
    const rules = client.createRuleManager(topic, "even");
    await rules.deleteRule("$Default");
    await rules.createRule("even", { sqlExpression: "n % 2 = 0" });

    const sender = client.createSender(topic);
    // Not awaited one by one: the SDK writes them back to back on one link.
    await Promise.all(
      Array.from({ length: count }, (_, n) =>
        sender.sendMessages({ messageId: `p-${n}`, body: n, applicationProperties: { n } }),
      ),
    );
    const all = await drainIds(client, topic, "all", count);
    assert.deepEqual(
      all.map((message) => message.messageId),
      Array.from({ length: count }, (_, n) => `p-${n}`),
    );
    const numbers = sequenceNumbersOf(all);
    assert.ok(
      numbers.every((number, index) => index === 0 || number > numbers[index - 1]),
      `sequence numbers in the order sent: ${numbers}`,
    );
    const even = await drainIds(client, topic, "even", count / 2);
    assert.deepEqual(
      even.map((message) => message.messageId),
      Array.from({ length: count / 2 }, (_, n) => `p-${2 * n}`),
    );
    // A subscription's copy carries the topic's number (rule SEQ-1).
    assert.deepEqual(sequenceNumbersOf(even), numbers.filter((_, index) => index % 2 === 0));
  });
});
