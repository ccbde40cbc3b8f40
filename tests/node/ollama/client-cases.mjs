// The official ollama npm package against an Ollama API at HOST: every method an application calls, one
// case each.
//
//   node client-cases.mjs HOST [KEY]
//
// Prints one JSON line per case: {"case", "ok", ...what the client made of the answer} or {"case", "ok":
// false, "error"}; a case that throws is reported, not fatal. tests/faults/test_ollama_node_client.py
// runs it against the proxy (in front of a scripted model) and checks what each line means.
import { Ollama } from 'ollama';

const [host, key] = process.argv.slice(2);
const ollama = new Ollama({ host, headers: key ? { Authorization: `Bearer ${key}` } : {} });
const HI = [{ role: 'user', content: 'Hi' }];
const WEATHER = {
  type: 'function',
  function: {
    name: 'get_weather', description: 'The weather in a city.',
    parameters: { type: 'object', properties: { city: { type: 'string' }, unit: { enum: ['c', 'f'] } }, required: ['city'] },
  },
};

/** The text, thought, calls and last object of a streamed answer. */
async function gathered(stream, field) {
  let text = '', lines = 0, last = null;
  const calls = [];
  for await (const part of stream) {
    text += field === 'response' ? part.response : part.message.content;
    calls.push(...(part.message?.tool_calls ?? []));
    lines += 1;
    last = part;
  }
  return { text, calls, lines, done: last.done, doneReason: last.done_reason, evalCount: last.eval_count };
}

const cases = {
  version: async () => ({ version: (await ollama.version()).version }),
  list: async () => ({ models: (await ollama.list()).models.map(({ name, model, size, digest, details }) => ({ name, model, size, digest, details })) }),
  show: async () => {
    const shown = await ollama.show({ model: 'llama.cpp' });
    return { capabilities: shown.capabilities, architecture: shown.model_info['general.architecture'], template: shown.template };
  },
  ps: async () => ({ models: (await ollama.ps()).models.map(({ name, expires_at, size_vram }) => ({ name, expires_at, size_vram })) }),
  chat: async () => {
    const answer = await ollama.chat({ model: 'llama3.2', messages: HI, options: { num_predict: 16, stop: ['\n\n'] } });
    return { text: answer.message.content, done: answer.done, doneReason: answer.done_reason, evalCount: answer.eval_count };
  },
  'chat-stream': async () => gathered(await ollama.chat({ model: 'llama3.2', messages: HI, stream: true }), 'message'),
  'chat-tools': async () => {
    const answer = await ollama.chat({ model: 'llama3.2', messages: [{ role: 'user', content: 'Weather in Zürich?' }], tools: [WEATHER] });
    return { text: answer.message.content, calls: answer.message.tool_calls ?? [] };
  },
  'chat-tools-stream': async () => gathered(
    await ollama.chat({ model: 'llama3.2', messages: [{ role: 'user', content: 'Weather in Zürich?' }], tools: [WEATHER], stream: true }),
    'message'),
  'generate-suffix': async () => gathered(
    await ollama.generate({ model: 'llama3.2', prompt: 'def add(a, b):\n    return ', suffix: '\n', stream: true }), 'response'),
  pull: async () => {
    try {
      await ollama.pull({ model: 'llama3.2' });
      return { refused: false };
    } catch (error) {
      return { refused: true, status: error.status_code, error: error.error };
    }
  },
};

const only = process.env.CASES ? process.env.CASES.split(',') : Object.keys(cases);
for (const name of only) {
  try {
    console.log(JSON.stringify({ case: name, ok: true, ...(await cases[name]()) }));
  } catch (error) {
    console.log(JSON.stringify({ case: name, ok: false, error: String(error?.message ?? error) }));
  }
}
