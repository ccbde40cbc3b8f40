// The Vercel AI SDK's Open Responses provider (@ai-sdk/open-responses, a typed client built on the
// spec) against a Responses API at BASE_URL: the calls an application makes with it, one per case.
//
//   node client-cases.mjs BASE_URL [MODEL]
//
// Prints one JSON line per case: {"case", "ok", ...what the SDK made of the answer} or {"case", "ok": false,
// "error"}; a case that throws (an HTTP error, an answer the SDK cannot read) is reported, not fatal.
// tests/e2e/test_open_responses_client.py runs it against the proxy and checks what each line means.
import { createOpenResponses } from '@ai-sdk/open-responses';
import { generateText, jsonSchema, streamText, tool } from 'ai';

const [baseUrl, modelId = 'gpt-4o-mini'] = process.argv.slice(2);
const provider = createOpenResponses({ name: 'proxy', url: `${baseUrl}/v1/responses`, apiKey: 'unused' });
const model = provider(modelId);

// Defined by its JSON schema, as tests/open_responses.py's WEATHER_TOOL; no execute: the call is the answer.
const tools = {
  get_weather: tool({
    description: 'Get the current weather for a location',
    inputSchema: jsonSchema({
      type: 'object', required: ['location'],
      properties: { location: { type: 'string', description: 'The city and state, e.g. San Francisco, CA' } },
    }),
  }),
};
const WEATHER_QUESTION = "What's the weather like in San Francisco?";
// A 1x1 PNG, the image of the compliance suite's image case.
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==', 'base64');

/** What a finished generateText or streamText result holds, in JSON. */
async function summary(result) {
  const response = await result.response;
  return {
    text: await result.text,
    finishReason: await result.finishReason,
    toolCalls: (await result.toolCalls).map(({ toolCallId, toolName, input }) => ({ toolCallId, toolName, input })),
    usage: await result.usage,
    responseId: response.id,
    modelId: response.modelId,
    // generateText keeps the raw answer: the test reads it with the spec's types too.
    body: response.body ?? null,
  };
}

/** streamText's result once its stream was read to the end; an error part (the SDK's) fails the case. */
async function streamed(options) {
  const errors = [];
  const result = streamText({ ...options, onError: ({ error }) => errors.push(String(error)) });
  const parts = [];
  for await (const part of result.fullStream) parts.push(part.type);
  if (errors.length) throw new Error(errors.join('; '));
  return { ...(await summary(result)), parts };
}

const CASES = {
  'generate-text': async () => summary(await generateText({ model, prompt: 'Say hello in exactly 3 words.' })),
  'stream-text': async () => streamed({ model, prompt: 'Count from 1 to 5.' }),
  'system-prompt': async () => summary(await generateText({
    model, system: 'You are a pirate. Always respond in pirate speak.', prompt: 'Say hello.' })),
  'tool-call': async () => summary(await generateText({ model, tools, prompt: WEATHER_QUESTION })),
  'tool-call-streaming': async () => streamed({ model, tools, prompt: WEATHER_QUESTION }),
  'image-input': async () => summary(await generateText({
    model,
    messages: [{ role: 'user', content: [
      { type: 'text', text: 'What do you see in this image? Answer in one sentence.' },
      { type: 'image', image: PNG, mediaType: 'image/png' }] }],
  })),
  'multi-turn': async () => summary(await generateText({
    model,
    messages: [
      { role: 'user', content: 'My name is Alice.' },
      { role: 'assistant', content: 'Hello Alice! Nice to meet you. How can I help you today?' },
      { role: 'user', content: 'What is my name?' }],
  })),
};

for (const [name, run] of Object.entries(CASES)) {
  try {
    console.log(JSON.stringify({ case: name, ok: true, ...(await run()) }));
  } catch (error) {
    console.log(JSON.stringify({ case: name, ok: false, error: `${error.name}: ${error.message}` }));
  }
}
