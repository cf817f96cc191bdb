# Drives the gateway's OpenAI-compatible API with the official openai Python
# package, as a user's application would, and prints what the SDK parsed as
# one JSON object on stdout, in the shape sdk.mjs prints, for the Go test to
# assert. Any exception fails the run (non-zero exit, traceback on stderr).
#
#   BASE_URL=http://127.0.0.1:PORT/openai/v1 API_KEY=... python3 sdk.py
import asyncio
import json
import os
import sys
from typing import Literal

import openai
from openai import AsyncOpenAI, OpenAI
from pydantic import BaseModel

client = OpenAI(base_url=os.environ["BASE_URL"], api_key=os.environ["API_KEY"], max_retries=0, timeout=20)
out = {"sdk": openai.__version__}

# Unary chat with sampling parameters.
c = client.chat.completions.create(
    model="chat",
    messages=[
        {"role": "developer", "content": "Answer briefly."},
        {"role": "user", "content": "SDK unary hello"},
    ],
    temperature=0.2, top_p=0.9, max_completion_tokens=64, stop=["END"], seed=7, user="sdk-test",
)
out["unary"] = {
    "id": c.id, "object": c.object, "model": c.model, "created": c.created,
    "role": c.choices[0].message.role, "content": c.choices[0].message.content,
    "finish_reason": c.choices[0].finish_reason, "usage": c.usage.model_dump(), "request_id": c._request_id,
}

# Streaming with usage: every chunk as the SDK yields it. reasoning_content
# is not in the SDK's types: it arrives as an extra field of the delta.
stream = client.chat.completions.create(
    model="chat",
    messages=[{"role": "user", "content": "SDK stream story"}],
    stream=True, stream_options={"include_usage": True},
)
s = {"chunks": 0, "ids": set(), "objects": set(), "content": "", "reasoning": "", "roles": [], "finish": [],
     "usageNullBeforeLast": True}
last = None
for chunk in stream:
    if last is not None and last.usage is not None:
        s["usageNullBeforeLast"] = False
    s["chunks"] += 1
    s["ids"].add(chunk.id)
    s["objects"].add(chunk.object)
    for ch in chunk.choices:
        if ch.delta.role:
            s["roles"].append(ch.delta.role)
        s["content"] += ch.delta.content or ""
        s["reasoning"] += getattr(ch.delta, "reasoning_content", None) or ""
        if ch.finish_reason:
            s["finish"].append(ch.finish_reason)
    last = chunk
s["usage"] = last.usage.model_dump()
s["lastChoices"] = len(last.choices)
s["ids"], s["objects"] = sorted(s["ids"]), sorted(s["objects"])
out["stream"] = s

# Tools, streamed: the SDK's stream helper assembles tool_calls deltas by
# index into the final message; then the tool results go back.
tools = [
    {"type": "function", "function": {"name": "get_stock_price", "description": "Latest price", "parameters": {
        "type": "object", "properties": {"ticker": {"type": "string"}}, "required": ["ticker"]}}},
    {"type": "function", "function": {"name": "get_financials", "description": "Financial statements", "parameters": {
        "type": "object", "properties": {"ticker": {"type": "string"}, "period": {"type": "string"}}}}},
]
messages = [{"role": "user", "content": "SDK tools: how is BHP doing?"}]
with client.chat.completions.stream(model="chat", messages=messages, tools=tools, tool_choice="auto") as runner:
    final = runner.get_final_completion()
msg = final.choices[0].message
out["tools"] = {
    "finish_reason": final.choices[0].finish_reason,
    "calls": [{"id": t.id, "type": t.type, "name": t.function.name, "arguments": json.loads(t.function.arguments)}
              for t in msg.tool_calls],
}
messages.append(msg.model_dump(exclude_none=True, exclude={"parsed"}))
for t in msg.tool_calls:
    messages.append({"role": "tool", "tool_call_id": t.id,
                     "content": '{"price": 45.10}' if t.function.name == "get_stock_price" else '{"revenue": "55.7B"}'})
answer = client.chat.completions.create(model="chat", messages=messages, tools=tools)
out["tools"]["answer"] = answer.choices[0].message.content
out["tools"]["answer_finish"] = answer.choices[0].finish_reason

# A stream that breaks off after its first chunks: the SDK raises the error
# event as an APIError.
text = ""
try:
    for chunk in client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "SDK cut stream"}], stream=True):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
    out["cut"] = {"thrown": False, "text": text}
except openai.APIError as e:
    out["cut"] = {"thrown": True, "apiError": True, "type": e.type, "text": text}


# Structured output through the SDK's own parse helper: it turns the
# pydantic model into a strict json_schema and parses the answer back.
class Verdict(BaseModel):
    status: Literal["RESOLVED", "UNRESOLVED"]


parsed = client.chat.completions.parse(
    model="chat",
    messages=[{"role": "user", "content": "SDK json: classify this conversation"}],
    response_format=Verdict,
)
out["json"] = parsed.choices[0].message.parsed.model_dump()

# A schema the model keeps failing, with the SDK's retries on: the gateway
# has tried its repair already, and its answer (x-should-retry: false) keeps
# the SDK from sending the request again.
retrying = OpenAI(base_url=os.environ["BASE_URL"], api_key=os.environ["API_KEY"], max_retries=2, timeout=20)
try:
    retrying.chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": "SDK bad json: classify this conversation"}],
        response_format={"type": "json_schema", "json_schema": {"name": "verdict", "schema": {
            "type": "object", "properties": {"status": {"type": "string", "enum": ["RESOLVED", "UNRESOLVED"]}},
            "required": ["status"]}}},
    )
    out["badJSON"] = {"thrown": False}
except openai.APIStatusError as e:
    out["badJSON"] = {"thrown": True, "internalServerError": isinstance(e, openai.InternalServerError),
                      "status": e.status_code, "code": e.code}

# Embeddings: the SDK asks for base64 unless told otherwise, and decodes.
b = client.embeddings.create(model="embed", input=["SDK embed one", "SDK embed two"])
f = client.embeddings.create(model="embed", input="SDK embed one", encoding_format="float")
out["embeddings"] = {
    "object": b.object, "model": b.model, "count": len(b.data), "indexes": [d.index for d in b.data],
    "base64": list(b.data[0].embedding), "float": f.data[0].embedding, "usage": b.usage.model_dump(),
}

# Models.
out["models"] = {"ids": [m.id for m in client.models.list()]}
one = client.models.retrieve("chat")
out["models"].update({"retrieved": one.id, "object": one.object})


# Errors arrive as the SDK's typed errors.
def failure(call, cls, key):
    try:
        call()
        return {"thrown": False}
    except openai.APIStatusError as e:
        return {"thrown": True, key: isinstance(e, cls), "status": e.status_code, "type": e.type, "code": e.code,
                "param": e.param}


out["notFound"] = failure(lambda: client.chat.completions.create(
    model="no-such-model", messages=[{"role": "user", "content": "hi"}]), openai.NotFoundError, "notFoundError")
out["badRequest"] = failure(lambda: client.chat.completions.create(
    model="chat", messages=[{"role": "user", "content": "hi"}], temperature="hot"), openai.BadRequestError, "badRequestError")
wrong = OpenAI(base_url=os.environ["BASE_URL"], api_key="sk-wrong", max_retries=0)
out["unauthorized"] = failure(lambda: wrong.models.list(), openai.AuthenticationError, "authenticationError")



# The async client (httpx's AsyncClient under anyio): a unary call and a
# stream, as async applications and frameworks make them.
async def async_calls():
    aclient = AsyncOpenAI(base_url=os.environ["BASE_URL"], api_key=os.environ["API_KEY"], max_retries=0, timeout=20)
    c = await aclient.chat.completions.create(model="chat", messages=[{"role": "user", "content": "SDK unary hello"}])
    text = ""
    async for chunk in await aclient.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "SDK stream story"}], stream=True):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
    await aclient.close()
    return {"unary": c.choices[0].message.content, "stream": text}


out["async"] = asyncio.run(async_calls())

sys.stdout.write(json.dumps(out) + "\n")
