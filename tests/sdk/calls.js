// Drives the official Anthropic and OpenAI SDKs for Node through relayd, one call of each
// kind an application makes, and prints one JSON line per call: its name, whether it
// succeeded, and what it returned or the error. The e2e tests read those lines.
//
// Usage: RELAY_E2E_TOKEN=<route token, or empty> node calls.js <relayd origin>
// NODE_PATH must name the node_modules holding `@anthropic-ai/sdk` and `openai`.
'use strict';

const Anthropic = require('@anthropic-ai/sdk');
const OpenAI = require('openai');

const [origin] = process.argv.slice(2);
// From the environment, not the command line, where other users' `ps` would show it.
const token = process.env.RELAY_E2E_TOKEN;
const defaultHeaders = token ? { 'x-relay-client-token': token } : {};
// Each request body carries this, so the test finds it among the provider's requests.
const marker = process.env.RELAY_E2E_MARKER || 'relay-e2e-sdk';
const AnthropicClient = Anthropic.default || Anthropic;
const OpenAIClient = OpenAI.default || OpenAI.OpenAI;
// No retries: a failure must show, not be hidden by a second attempt.
const anthropic = new AnthropicClient({ baseURL: origin, apiKey: 'sk-ant-e2e', defaultHeaders, maxRetries: 0 });
const openai = new OpenAIClient({ baseURL: `${origin}/v1`, apiKey: 'sk-e2e', defaultHeaders, maxRetries: 0 });
const messages = [{ role: 'user', content: `say hi ${marker}` }];

const calls = {
  'anthropic.messages.create': async () => {
    const m = await anthropic.messages.create({ model: 'claude-sonnet-4-5', max_tokens: 64, messages });
    return { type: m.type, stop_reason: m.stop_reason, text: m.content.map((b) => b.text || '').join('') };
  },
  'anthropic.messages.stream': async () => {
    const stream = anthropic.messages.stream({ model: 'claude-sonnet-4-5', max_tokens: 64, messages });
    let text = '';
    stream.on('text', (delta) => { text += delta; });
    const final = await stream.finalMessage();
    return { stop_reason: final.stop_reason, text };
  },
  'anthropic.messages.countTokens': async () => {
    const c = await anthropic.messages.countTokens({ model: 'claude-sonnet-4-5', messages });
    return { input_tokens: c.input_tokens };
  },
  'anthropic.models.list': async () => {
    const page = await anthropic.models.list();
    return { ids: page.data.map((m) => m.id) };
  },
  'openai.chat.completions.create': async () => {
    const r = await openai.chat.completions.create({ model: 'gpt-5', messages });
    return { finish_reason: r.choices[0].finish_reason, text: r.choices[0].message.content };
  },
  'openai.chat.completions.stream': async () => {
    const stream = await openai.chat.completions.create({ model: 'gpt-5', messages, stream: true });
    let text = '';
    let chunks = 0;
    for await (const chunk of stream) {
      chunks += 1;
      text += (chunk.choices[0] && chunk.choices[0].delta.content) || '';
    }
    return { chunks, text };
  },
  'openai.responses.create': async () => {
    const r = await openai.responses.create({ model: 'gpt-5', input: messages[0].content });
    return { status: r.status, text: r.output_text };
  },
  'openai.responses.stream': async () => {
    const stream = await openai.responses.create({ model: 'gpt-5', input: messages[0].content, stream: true });
    const types = [];
    for await (const event of stream) types.push(event.type);
    return { last: types[types.length - 1], events: types.length };
  },
  'openai.models.list': async () => {
    const page = await openai.models.list();
    return { ids: page.data.map((m) => m.id) };
  },
};

(async () => {
  for (const [name, call] of Object.entries(calls)) {
    try {
      console.log(JSON.stringify({ name, ok: true, result: await call() }));
    } catch (error) {
      console.log(JSON.stringify({ name, ok: false, status: error.status || null, error: String(error) }));
    }
  }
})();
