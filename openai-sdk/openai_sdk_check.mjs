// The official OpenAI SDK (npm package `openai`) against a pillar gateway, exactly as a user's
// code calls it. Run by tests/integration/openai_sdk_test.cc with:
//   PILLAR_URL (http://127.0.0.1:PORT/v1), PILLAR_KEY (may call "assistant"),
//   PILLAR_READER_KEY (may see it, not call it), PILLAR_LIMITED_KEY (one call, then 429).
// Prints one line per check; exits 1 when any fails.
import OpenAI from 'openai';

const baseURL = process.env.PILLAR_URL;
const client = (apiKey) => new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 10000 });
const main = client(process.env.PILLAR_KEY);
let failures = 0;

function check(name, ok, detail = '') {
  console.log(`${ok ? 'ok' : 'FAIL'} ${name}${detail ? ': ' + detail : ''}`);
  if (!ok) failures++;
}

// Calls `fn`, which must fail with an APIError of `status` whose error has a message.
async function expectError(name, status, errorClass, fn) {
  try {
    await fn();
    check(name, false, 'no error');
  } catch (e) {
    const ok = e instanceof errorClass && e.status === status && typeof e.message === 'string' &&
               e.error && typeof e.error.message === 'string';
    check(name, ok, `${e.constructor.name} ${e.status} ${JSON.stringify(e.error)}`);
    return e;
  }
}

const messages = [{ role: 'user', content: 'Say something about pillar.' }];

const chat = await main.chat.completions.create({ model: 'assistant', messages });
const usage = chat.usage;
check('chat completion', chat.object === 'chat.completion' &&
      chat.choices[0].message.role === 'assistant' &&
      chat.choices[0].message.content.length > 0 &&
      usage.total_tokens === usage.prompt_tokens + usage.completion_tokens,
      JSON.stringify(chat.choices[0]));

const stream = await main.chat.completions.create({
  model: 'assistant', messages, stream: true, stream_options: { include_usage: true } });
let text = '';
let streamedUsage = null;
let chunks = 0;
for await (const chunk of stream) {
  chunks++;
  if (chunk.choices.length > 0) text += chunk.choices[0].delta.content ?? '';
  if (chunk.usage) streamedUsage = chunk.usage;
}
check('streamed chat completion', chunks > 2 && text.length > 0 && streamedUsage !== null &&
      streamedUsage.completion_tokens > 0, `${chunks} chunks, "${text}"`);

const embeddings = await main.embeddings.create({ model: 'assistant', input: ['one', 'two'] });
check('embeddings', embeddings.data.length === 2 && embeddings.data[1].embedding.length === 8,
      `${embeddings.data.length} vectors`);

const models = [];
for await (const m of main.models.list()) models.push(m.id);
check('model list', models.includes('assistant'), models.join(','));

await expectError('401 for a bad key', 401, OpenAI.AuthenticationError,
                  () => client('pk_not-a-key').chat.completions.create({ model: 'assistant', messages }));
await expectError('403 for a key that may not call the model', 403, OpenAI.PermissionDeniedError,
                  () => client(process.env.PILLAR_READER_KEY).chat.completions.create(
                      { model: 'assistant', messages }));
await expectError('404 for a model that does not exist', 404, OpenAI.NotFoundError,
                  () => main.chat.completions.create({ model: 'nothing-here', messages }));
const limited = client(process.env.PILLAR_LIMITED_KEY);
await limited.chat.completions.create({ model: 'assistant', messages });
const limitedError = await expectError('429 past the limit', 429, OpenAI.RateLimitError,
                  () => limited.chat.completions.create({ model: 'assistant', messages }));
check('429 says when to come back', limitedError?.headers?.['retry-after'] !== undefined,
      String(limitedError?.headers?.['retry-after']));
await expectError('400 for a blocked prompt', 400, OpenAI.BadRequestError,
                  () => main.chat.completions.create({ model: 'assistant', messages: [
                      { role: 'user', content: 'my key is AKIAIOSFODNN7EXAMPLE' }] }));

process.exit(failures === 0 ? 0 : 1);
