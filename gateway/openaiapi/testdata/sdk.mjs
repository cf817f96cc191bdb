// Drives the gateway's OpenAI-compatible API with the official openai npm
// package, as a user's application would, and prints what the SDK parsed
// as one JSON object on stdout for the Go test to assert. Any exception
// fails the run (non-zero exit, stack on stderr).
//
//   BASE_URL=http://127.0.0.1:PORT/openai/v1 API_KEY=... node sdk.mjs
import OpenAI from 'openai';

const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: process.env.API_KEY, maxRetries: 0, timeout: 20000 });
const out = {};

// Unary chat with sampling parameters.
{
  const c = await client.chat.completions.create({
    model: 'chat',
    messages: [
      { role: 'developer', content: 'Answer briefly.' },
      { role: 'user', content: 'SDK unary hello' },
    ],
    temperature: 0.2, top_p: 0.9, max_completion_tokens: 64, stop: ['END'], seed: 7, user: 'sdk-test',
  });
  out.unary = {
    id: c.id, object: c.object, model: c.model, created: c.created,
    role: c.choices[0].message.role, content: c.choices[0].message.content,
    finish_reason: c.choices[0].finish_reason, usage: c.usage, request_id: c._request_id,
  };
}

// Streaming with usage: every chunk as the SDK yields it.
{
  const stream = await client.chat.completions.create({
    model: 'chat',
    messages: [{ role: 'user', content: 'SDK stream story' }],
    stream: true, stream_options: { include_usage: true },
  });
  const s = { chunks: 0, ids: new Set(), objects: new Set(), content: '', reasoning: '', roles: [], finish: [], usage: null, usageNullBeforeLast: true, lastChoices: -1 };
  let last = null;
  for await (const chunk of stream) {
    if (last && last.usage !== null) s.usageNullBeforeLast = false;
    s.chunks++;
    s.ids.add(chunk.id);
    s.objects.add(chunk.object);
    for (const ch of chunk.choices) {
      if (ch.delta.role) s.roles.push(ch.delta.role);
      s.content += ch.delta.content ?? '';
      s.reasoning += ch.delta.reasoning_content ?? '';
      if (ch.finish_reason) s.finish.push(ch.finish_reason);
    }
    last = chunk;
  }
  s.usage = last.usage;
  s.lastChoices = last.choices.length;
  out.stream = { ...s, ids: [...s.ids], objects: [...s.objects] };
}

// Tools, streamed: the SDK's stream helper assembles tool_calls deltas by
// index into the final message; then the tool results go back.
{
  const tools = [
    { type: 'function', function: { name: 'get_stock_price', description: 'Latest price', parameters: { type: 'object', properties: { ticker: { type: 'string' } }, required: ['ticker'] } } },
    { type: 'function', function: { name: 'get_financials', description: 'Financial statements', parameters: { type: 'object', properties: { ticker: { type: 'string' }, period: { type: 'string' } } } } },
  ];
  const messages = [{ role: 'user', content: 'SDK tools: how is BHP doing?' }];
  const runner = client.chat.completions.stream({ model: 'chat', messages, tools, tool_choice: 'auto' });
  const final = await runner.finalChatCompletion();
  const msg = final.choices[0].message;
  out.tools = {
    finish_reason: final.choices[0].finish_reason,
    calls: msg.tool_calls.map((c) => ({ id: c.id, type: c.type, name: c.function.name, arguments: JSON.parse(c.function.arguments) })),
  };
  messages.push(msg);
  for (const c of msg.tool_calls) {
    messages.push({ role: 'tool', tool_call_id: c.id, content: c.function.name === 'get_stock_price' ? '{"price": 45.10}' : '{"revenue": "55.7B"}' });
  }
  const answer = await client.chat.completions.create({ model: 'chat', messages, tools });
  out.tools.answer = answer.choices[0].message.content;
  out.tools.answer_finish = answer.choices[0].finish_reason;
}

// A stream that breaks off after its first chunks: the SDK raises the
// error event as an APIError.
{
  let text = '';
  try {
    const stream = await client.chat.completions.create({ model: 'chat', messages: [{ role: 'user', content: 'SDK cut stream' }], stream: true });
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    out.cut = { thrown: false, text };
  } catch (e) {
    out.cut = { thrown: true, apiError: e instanceof OpenAI.APIError, type: e.type, text };
  }
}

// Structured output.
{
  const c = await client.chat.completions.create({
    model: 'chat',
    messages: [{ role: 'user', content: 'SDK json: classify this conversation' }],
    response_format: { type: 'json_schema', json_schema: { name: 'verdict', strict: true, schema: { type: 'object', properties: { status: { type: 'string', enum: ['RESOLVED', 'UNRESOLVED'] } }, required: ['status'], additionalProperties: false } } },
  });
  out.json = JSON.parse(c.choices[0].message.content);
}

// A schema the model keeps failing, with the SDK's retries on: the gateway
// has tried its repair already, and its answer (x-should-retry: false)
// keeps the SDK from sending the request again.
{
  const retrying = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: process.env.API_KEY, maxRetries: 2, timeout: 20000 });
  try {
    await retrying.chat.completions.create({
      model: 'chat',
      messages: [{ role: 'user', content: 'SDK bad json: classify this conversation' }],
      response_format: { type: 'json_schema', json_schema: { name: 'verdict', schema: { type: 'object', properties: { status: { type: 'string', enum: ['RESOLVED', 'UNRESOLVED'] } }, required: ['status'] } } },
    });
    out.badJSON = { thrown: false };
  } catch (e) {
    out.badJSON = { thrown: true, internalServerError: e instanceof OpenAI.InternalServerError, status: e.status, code: e.code };
  }
}

// Embeddings: the SDK asks for base64 unless told otherwise, and decodes.
{
  const b = await client.embeddings.create({ model: 'embed', input: ['SDK embed one', 'SDK embed two'] });
  const f = await client.embeddings.create({ model: 'embed', input: 'SDK embed one', encoding_format: 'float' });
  out.embeddings = {
    object: b.object, model: b.model, count: b.data.length, indexes: b.data.map((d) => d.index),
    base64: Array.from(b.data[0].embedding), float: f.data[0].embedding, usage: b.usage,
  };
}

// Models.
{
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  const one = await client.models.retrieve('chat');
  out.models = { ids, retrieved: one.id, object: one.object };
}

// Errors arrive as the SDK's typed errors.
{
  try {
    await client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] });
    out.notFound = { thrown: false };
  } catch (e) {
    out.notFound = { thrown: true, notFoundError: e instanceof OpenAI.NotFoundError, status: e.status, type: e.type, code: e.code, param: e.param };
  }
  try {
    await client.chat.completions.create({ model: 'chat', messages: [{ role: 'user', content: 'hi' }], temperature: 'hot' });
    out.badRequest = { thrown: false };
  } catch (e) {
    out.badRequest = { thrown: true, badRequestError: e instanceof OpenAI.BadRequestError, status: e.status, type: e.type, param: e.param };
  }
  const wrongKey = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: 'sk-wrong', maxRetries: 0 });
  try {
    await wrongKey.models.list();
    out.unauthorized = { thrown: false };
  } catch (e) {
    out.unauthorized = { thrown: true, authenticationError: e instanceof OpenAI.AuthenticationError, status: e.status, type: e.type, code: e.code };
  }
}

process.stdout.write(JSON.stringify(out) + '\n');
