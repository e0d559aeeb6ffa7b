// openai_chat.mjs: the official openai npm package (v4), a client nobody here wrote, talks
// to vramd as if it were OpenAI: a chat completion, a streamed one, the model list, and an
// error for a model vramd does not serve.
//
//   node tests/js/openai_chat.mjs BASE_URL MODEL ALIAS
//     BASE_URL  vramd's OpenAI base, e.g. http://127.0.0.1:8800/v1
//     MODEL     a configured model name (the plain chat goes to it)
//     ALIAS     one of its aliases (the streamed chat goes to it)
//
// Prints one JSON line: {"chat": {...}, "stream": {...}, "models": [...], "unknown": {...}}
// and exits 0; on an unexpected error prints {"error": "..."} and exits 1. Assertions are
// the caller's (tests/clients/test_openai_client.py).
import OpenAI from 'openai';

const [baseURL, model, alias] = process.argv.slice(2);
if (!baseURL || !model || !alias) {
  console.error('usage: node openai_chat.mjs BASE_URL MODEL ALIAS');
  process.exit(2);
}

// vramd needs no API key; the client insists on one. No retries: each call is seen once.
const client = new OpenAI({ baseURL, apiKey: 'vramd-needs-no-key', maxRetries: 0, timeout: 60_000 });
const messages = [
  { role: 'system', content: 'You are a test.' },
  { role: 'user', content: 'Say something about GPU memory.' },
];

async function main() {
  const out = {};

  const { data: chat, response } = await client.chat.completions
    .create({ model, messages, max_tokens: 32 })
    .withResponse();
  out.chat = {
    id: chat.id,
    object: chat.object,
    model: chat.model,
    content: chat.choices?.[0]?.message?.content ?? null,
    role: chat.choices?.[0]?.message?.role ?? null,
    finish_reason: chat.choices?.[0]?.finish_reason ?? null,
    usage: chat.usage ?? null,
    request_id: response.headers.get('x-request-id'),
    queue_ms: response.headers.get('x-vramd-queue-ms'),
  };

  const stream = await client.chat.completions.create({
    model: alias,
    messages,
    max_tokens: 64,
    stream: true,
  });
  const s = { chunks: 0, content_chunks: 0, content: '', roles: [], finish_reason: null, objects: [] };
  for await (const chunk of stream) {
    s.chunks += 1;
    if (!s.objects.includes(chunk.object)) s.objects.push(chunk.object);
    const choice = chunk.choices?.[0];
    if (!choice) continue;
    if (choice.delta?.role) s.roles.push(choice.delta.role);
    if (choice.delta?.content) {
      s.content += choice.delta.content;
      s.content_chunks += 1;
    }
    if (choice.finish_reason) s.finish_reason = choice.finish_reason;
  }
  out.stream = s;

  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  out.models = ids;

  try {
    await client.chat.completions.create({ model: 'no-such-model', messages });
    out.unknown = { error: false };
  } catch (e) {
    if (!(e instanceof OpenAI.APIError)) throw e;
    out.unknown = { error: true, status: e.status ?? null, code: e.code ?? null, message: e.message };
  }

  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.log(JSON.stringify({ error: String(e?.stack || e), status: e?.status ?? null }));
  process.exit(1);
});
