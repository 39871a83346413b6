// The official openai npm SDK against chatd's /v1 (docs/openai.md), run by
// cmd/openaisdktest's TestOpenAINodeSDK with a stack whose organization's
// default model is chatd's scripted model:
//
//   CHATD_OPENAI_BASE_URL     <api origin>/v1
//   CHATD_OPENAI_TOKEN        a chatd bearer token (the SDK's API key)
//   CHATD_OPENAI_OTHER_TOKEN  a token of a user of another organization
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

const baseURL = required("CHATD_OPENAI_BASE_URL");
const client = new OpenAI({ baseURL, apiKey: required("CHATD_OPENAI_TOKEN"), maxRetries: 0, timeout: 120_000 });
const other = new OpenAI({ baseURL, apiKey: required("CHATD_OPENAI_OTHER_TOKEN"), maxRetries: 0 });

function required(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run this through go test ./cmd/openaisdktest`);
  return v;
}

let modelID;
async function model() {
  if (!modelID) {
    const models = await client.models.list();
    assert.ok(models.data.length > 0, "the organization has a model");
    modelID = models.data[0].id;
  }
  return modelID;
}

// read collects a stream's events, stopping after stopAfter of them (the
// connection is then dropped) or at its end.
async function read(stream, stopAfter = Infinity) {
  const out = [];
  for await (const event of stream) {
    out.push(event);
    if (out.length >= stopAfter) break;
  }
  return out;
}

const deltaText = (events) =>
  events.filter((e) => e.type === "response.output_text.delta").map((e) => e.delta).join("");

function assertContiguous(events, from = 0) {
  events.forEach((e, i) => assert.equal(e.sequence_number, from + i, `event ${i} (${e.type})`));
}

test("create waits for the turn and previous_response_id continues its chat", async () => {
  const m = await model();
  const first = await client.responses.create({ model: m, input: "::reply hello there", instructions: "Answer briefly.",
    metadata: { case: "node" } });
  assert.equal(first.status, "completed");
  assert.equal(first.output_text, "hello there");
  assert.equal(first.metadata.case, "node");
  const second = await client.responses.create({ model: m, input: "::reply again", previous_response_id: first.id });
  assert.equal(second.output_text, "again");
  assert.equal(second.previous_response_id, first.id);
  const got = await client.responses.retrieve(first.id);
  assert.equal(got.output_text, "hello there", "the earlier turn still reads as it was");
});

test("a background stream dropped mid-text resumes with starting_after and replays after completion", async () => {
  const m = await model();
  const bg = await client.responses.create({ model: m, input: "::stream 20 10", background: true });
  assert.equal(bg.background, true);

  // Drop the connection right after the first delta.
  const head = await read(await client.responses.retrieve(bg.id, { stream: true }), 6);
  assert.equal(head[0].type, "response.created");
  assert.equal(head[5].type, "response.output_text.delta");
  const last = head[head.length - 1].sequence_number;
  const tail = await read(await client.responses.retrieve(bg.id, { stream: true, starting_after: last }));
  const all = [...head, ...tail];
  assertContiguous(all);
  assert.equal(all.at(-1).type, "response.completed");
  assert.ok(all.filter((e) => e.type === "response.output_text.delta").length > 1,
    "the text arrives in several deltas, as the model produces it");

  const stored = await client.responses.retrieve(bg.id);
  assert.equal(stored.status, "completed");
  assert.match(stored.output_text, /^tok1 tok2 .* tok20$/);
  assert.equal(deltaText(all), stored.output_text);
  assert.equal(all.at(-1).response.output_text, stored.output_text);

  // After completion the same events come back with the same numbers.
  const replay = await read(await client.responses.retrieve(bg.id, { stream: true, starting_after: 0 }));
  assert.deepEqual(replay.map((e) => [e.sequence_number, e.type, e.delta]), all.slice(1).map((e) => [e.sequence_number, e.type, e.delta]));

  // The SDK's accumulating helper follows the stream to the stored response.
  const helper = client.responses.stream({ response_id: bg.id, starting_after: 3 });
  const final = await helper.finalResponse();
  assert.equal(final.output_text, stored.output_text);
});

test("create with stream: true streams the new turn", async () => {
  const m = await model();
  const events = await read(await client.responses.create({ model: m, input: "::reply streamed words", stream: true }));
  assertContiguous(events);
  assert.equal(events[0].type, "response.created");
  assert.equal(events.at(-1).type, "response.completed");
  assert.equal(deltaText(events), "streamed words");
  assert.equal(events.at(-1).response.status, "completed");
});

test("cancel interrupts a turn that would never end", async () => {
  const m = await model();
  const stall = await client.responses.create({ model: m, input: "::stall", background: true });
  const cancelled = await client.responses.cancel(stall.id);
  assert.equal(cancelled.status, "cancelled");
  const events = await read(await client.responses.retrieve(stall.id, { stream: true }));
  assertContiguous(events);
  assert.equal(events.at(-1).type, "response.incomplete");
  assert.equal(events.at(-1).response.status, "cancelled");
});

test("a conversation is a chat: its responses are its turns, its items their messages", async () => {
  const m = await model();
  const conv = await client.conversations.create({ metadata: { k: "v" } });
  const r = await client.responses.create({ model: m, input: "::reply in a conversation", conversation: conv.id });
  assert.equal(r.output_text, "in a conversation");
  assert.equal(r.conversation.id, conv.id);
  const items = await client.conversations.items.list(conv.id, { order: "asc" });
  assert.deepEqual(items.data.map((i) => i.role), ["user", "assistant"]);
  const deleted = await client.conversations.delete(conv.id);
  assert.equal(deleted.deleted, true);
});

test("errors arrive as the SDK's error classes", async () => {
  await assert.rejects(client.responses.retrieve("resp_00000000000000000000000000000000"), OpenAI.NotFoundError);
  const mine = await client.responses.create({ model: await model(), input: "::reply mine" });
  await assert.rejects(other.responses.retrieve(mine.id), OpenAI.NotFoundError, "another tenant's response is a 404");
  const anonymous = new OpenAI({ baseURL, apiKey: "not-a-token", maxRetries: 0 });
  await assert.rejects(anonymous.models.list(), OpenAI.AuthenticationError);
  await assert.rejects(client.responses.create({ model: "no-such-model", input: "x" }), (err) => {
    assert.ok(err instanceof OpenAI.BadRequestError, String(err));
    assert.equal(err.param, "model");
    return true;
  });
});

test("a function tool round trip: the call ends the response, its output continues the turn", async () => {
  const m = await model();
  const tools = [{
    type: "function", name: "get_weather", strict: true,
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"], additionalProperties: false },
  }];
  const events = await read(await client.responses.create({
    model: m, tools, stream: true, input: '::tool get_weather {"city":"Paris"}',
  }));
  assertContiguous(events);
  const done = events.find((e) => e.type === "response.function_call_arguments.done");
  assert.ok(done, `no function_call_arguments.done in ${events.map((e) => e.type)}`);
  assert.deepEqual(JSON.parse(done.arguments), { city: "Paris" });
  const first = events.at(-1).response;
  assert.equal(events.at(-1).type, "response.completed");
  const call = first.output.find((i) => i.type === "function_call");
  assert.ok(call, "the response ends with its function_call item");
  assert.equal(call.name, "get_weather");
  assert.equal(call.id, done.item_id);

  const second = await client.responses.create({
    model: m, tools, previous_response_id: first.id,
    input: [{ type: "function_call_output", call_id: call.call_id, output: '{"temp_c":21}' }],
  });
  assert.equal(second.status, "completed");
  assert.equal(second.output_text, "done", "the scripted model answers the tool's result");
  const inputs = await client.responses.inputItems.list(second.id);
  assert.deepEqual(inputs.data.map((i) => [i.type, i.call_id]), [["function_call_output", call.call_id]]);

  await assert.rejects(client.responses.create({
    model: m, input: "search", tools: [{ type: "web_search" }],
  }), (err) => {
    assert.ok(err instanceof OpenAI.BadRequestError, String(err));
    assert.equal(err.param, "tools[0].type");
    return true;
  });
});
