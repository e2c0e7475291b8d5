// The Node openai SDK against rampmeter's demo API, the same scenarios as
// ../openai_go_test.go (read its comments for the derivations). Run by
// TestNodeSDK in .., which starts the demo and sets DEMO_BASE_URL:
//
//	DEMO_BASE_URL=http://127.0.0.1:PORT/v1 node --test sdk.test.mjs
import test from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import OpenAI from 'openai';

const baseURL = process.env.DEMO_BASE_URL;
if (!baseURL) throw new Error('DEMO_BASE_URL is not set (run through TestNodeSDK)');
const TPD = 2000; // the demo's -tpd
const RPM = 60; // the demo's -rpm

const newKey = () => 'sk-free-' + randomBytes(6).toString('hex');

// client returns an SDK client for key with the SDK's default retries
// (2) unless maxRetries says otherwise, and the attempts it makes.
function client(key, { maxRetries } = {}) {
  const attempts = [];
  const recordingFetch = async (url, init) => {
    const sent = performance.now();
    const res = await fetch(url, init);
    attempts.push({ sent, answered: performance.now(), status: res.status, headers: res.headers });
    return res;
  };
  const c = new OpenAI({ apiKey: key, baseURL, fetch: recordingFetch, ...(maxRetries === undefined ? {} : { maxRetries }) });
  return { c, attempts, statuses: () => attempts.map((a) => a.status) };
}

const hello = (maxTokens, extra = {}) => ({
  model: 'demo',
  messages: [{ role: 'user', content: 'Hello there' }], // 3 prompt tokens
  max_completion_tokens: maxTokens,
  ...extra,
});

const words = (n) => Array.from({ length: n }, (_, i) => 'tok' + i).join(' ');

test('completion', async () => {
  const { c, statuses } = client(newKey());
  const { data, response } = await c.chat.completions.create(hello(16)).withResponse();
  assert.equal(data.choices[0].message.content, words(16));
  assert.equal(data.choices[0].message.role, 'assistant');
  assert.deepEqual(data.usage, { prompt_tokens: 3, completion_tokens: 16, total_tokens: 19 });
  assert.equal(response.headers.get('x-ratelimit-remaining-tokens'), String(TPD - 19));
  assert.equal(response.headers.get('x-ratelimit-remaining-requests'), String(RPM - 1));
  assert.deepEqual(statuses(), [200]);
});

test('stream without usage: role first, no chunk without choices, usage settled', async () => {
  const { c, statuses } = client(newKey());
  // The stream helper's finalChatCompletion() threw "missing role for
  // choice 0" without the role delta.
  const stream = c.chat.completions.stream(hello(100));
  let chunks = 0;
  for await (const chunk of stream) {
    assert.ok(chunk.choices.length > 0, `chunk ${chunks} has no choices: ${JSON.stringify(chunk)}`);
    void chunk.choices[0].delta; // the pattern that crashed on the usage chunk
    assert.equal(chunk.usage ?? null, null);
    chunks++;
  }
  const final = await stream.finalChatCompletion();
  assert.equal(chunks, 1 + 50 + 1);
  assert.equal(final.choices[0].message.role, 'assistant');
  assert.equal(final.choices[0].message.content, words(50));
  // 103 reserved, 53 used: the next call (19 reserved) sees 2,000 − 53 − 19.
  // The SDK reads a stream to its end (past [DONE]), after the settlement.
  const { response } = await c.chat.completions.create(hello(16)).withResponse();
  assert.equal(response.headers.get('x-ratelimit-remaining-tokens'), String(TPD - 53 - 19));
  assert.deepEqual(statuses(), [200, 200]);
});

test('stream with usage', async () => {
  const { c } = client(newKey());
  const stream = await c.chat.completions.create(hello(100, { stream: true, stream_options: { include_usage: true } }));
  const usage = [];
  for await (const chunk of stream) {
    if (chunk.choices.length === 0) usage.push(chunk.usage);
  }
  assert.deepEqual(usage, [{ prompt_tokens: 3, completion_tokens: 50, total_tokens: 53 }]);
});

// promisedWait is what the SDK reads: retry-after-ms, else Retry-After.
function promisedWait(headers) {
  const ms = headers.get('retry-after-ms');
  if (ms !== null) return Number(ms);
  const s = headers.get('retry-after');
  assert.ok(s !== null, 'a 429 carries Retry-After');
  return Number(s) * 1000;
}

async function exhaustRequests(key) {
  const { c, statuses } = client(key, { maxRetries: 0 });
  for (let i = 0; i < 3 * RPM; i++) {
    try {
      await c.chat.completions.create(hello(1));
    } catch (e) {
      if (e.status === 429) return;
      throw e;
    }
  }
  assert.fail(`no 429 after ${3 * RPM} calls: ${statuses()}`);
}

test('a 429 is retried after the promised wait, and succeeds', async () => {
  const key = newKey();
  for (let attempt = 0; ; attempt++) {
    await exhaustRequests(key);
    const { c, attempts, statuses } = client(key);
    const start = performance.now();
    await c.chat.completions.create(hello(1));
    if (attempts[0].status === 200) {
      assert.ok(attempt < 5, 'the key refilled before every call');
      continue; // a request refilled in between: nothing to retry
    }
    assert.deepEqual(statuses(), [429, 200]);
    const wait = promisedWait(attempts[0].headers);
    assert.ok(wait > 0 && wait <= 1000, `promised wait ${wait}ms`);
    const gap = attempts[1].sent - attempts[0].answered;
    assert.ok(gap >= wait - 2, `retried after ${gap}ms, before the promised ${wait}ms`);
    assert.ok(performance.now() - start < wait + 2000);
    return;
  }
});

test('413 and 403 are never retried', async () => {
  let { c, attempts, statuses } = client(newKey());
  await assert.rejects(
    c.chat.completions.create({ model: 'demo', messages: [{ role: 'user', content: 'x'.repeat(8004) }], max_completion_tokens: 1 }),
    (e) => e.status === 413,
  );
  assert.deepEqual(statuses(), [413]);
  assert.equal(attempts[0].headers.get('retry-after'), null);

  ({ c, attempts, statuses } = client(newKey()));
  const quota = { model: 'demo', messages: [{ role: 'user', content: 'x'.repeat(3600) }], max_completion_tokens: 50 };
  await c.chat.completions.create(quota);
  await c.chat.completions.create(quota);
  await assert.rejects(c.chat.completions.create(quota), (e) => e.status === 403 && e.code === 'insufficient_quota');
  assert.deepEqual(statuses(), [200, 200, 403]);
  assert.ok(['36719', '36720'].includes(attempts[2].headers.get('retry-after')));
});

test("a 502's reservation is released before its header", async () => {
  const { c, attempts, statuses } = client(newKey());
  await assert.rejects(c.chat.completions.create({ ...hello(16), model: 'demo-fail' }), (e) => e.status === 502);
  assert.deepEqual(statuses(), [502, 502, 502]);
  for (const a of attempts) {
    assert.equal(a.headers.get('x-ratelimit-remaining-tokens'), String(TPD));
    assert.equal(a.headers.get('x-ratelimit-reset-tokens'), '0s');
    assert.ok(Number(a.headers.get('x-ratelimit-remaining-requests')) <= RPM - 1);
  }
  const { response } = await c.chat.completions.create(hello(16)).withResponse();
  assert.equal(response.headers.get('x-ratelimit-remaining-tokens'), String(TPD - 19));
});
