// Commands act only on nodes the tree handed out (issue 26, item 1): what a
// `command:` link or a keybinding can pass (a string, a look-alike object, a
// tree item handle) is not one.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Node, NodeRegistry, nodeKey, requestOf, socketOf } from "../../src/nodes";

test("only issued nodes are known: strings, look-alike objects and forged handles are not", () => {
  const r = new NodeRegistry();
  const node: Node = r.issue({ type: "escalation", socket: "/run/x/control.sock", requestId: "0123abcd" });
  assert.equal(r.known(node), node);
  for (const forged of [
    "0123abcd",
    ["0123abcd"],
    { type: "escalation", socket: "/run/x/control.sock", requestId: "0123abcd" },
    { type: "escalation", requestId: "0123abcd" },
    { $treeViewId: "lazaret.tree", $treeItemHandle: `1/${nodeKey(node)}` },
    JSON.parse(JSON.stringify(node)),
    null,
    undefined,
    42,
  ]) {
    assert.equal(r.known(forged), undefined, JSON.stringify(forged));
  }
  assert.deepEqual(requestOf(r.known(node)), { socket: "/run/x/control.sock", requestId: "0123abcd" });
  assert.equal(requestOf(r.known({ ...node })), undefined);
});

test("tree item ids carry a random salt per window (a handle cannot be guessed), keyed by (domain, id)", () => {
  const a = new NodeRegistry();
  const b = new NodeRegistry();
  const n: Node = { type: "escalation", socket: "/s", requestId: "id" };
  assert.notEqual(a.itemId(n), b.itemId(n));
  assert.ok(a.itemId(n).startsWith(a.salt) && a.salt.length >= 16);
  assert.notEqual(nodeKey({ type: "escalation", socket: "/s1", requestId: "id" }), nodeKey({ type: "escalation", socket: "/s2", requestId: "id" }));
  assert.equal(socketOf({ type: "leaf", id: "x", label: "y", socket: "/s" }), "/s");
  assert.deepEqual(requestOf({ type: "leaf", id: "x", label: "y", socket: "/s", requestId: "r" }), { socket: "/s", requestId: "r" });
});
