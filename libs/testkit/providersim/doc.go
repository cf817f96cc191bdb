// Package providersim simulates LLM providers over real HTTP, speaking each
// provider's wire format exactly (see shared/reference/providers.md):
//
//   - OpenAI-style (DeepSeek, Qwen compatible mode, OpenAI, Ollama /v1):
//     POST /chat/completions and /v1/chat/completions (JSON or SSE with
//     `data: [DONE]`), POST /embeddings and /v1/embeddings, GET /models and
//     /v1/models. Qwen's /compatible-mode/v1 prefix is accepted too.
//   - Ollama native: POST /api/chat (NDJSON stream, or one JSON object with
//     "stream": false), POST /api/embed, GET /api/tags.
//
// Tests use it as the provider's cloud API, which is the one boundary the
// mesh cannot reach; the model gateway also serves it in-process as the
// provider "sim" for demos on machines without a model. Every generated text
// starts with "[simulated] " unless a test scripts the exact text.
//
// # Starting it
//
//	sim := providersim.Start(t, providersim.Preset(providersim.DeepSeek)) // httptest server, closed in t.Cleanup
//	client := deepseek.New(sim.URL, ...)                                    // point the code under test at sim.URL
//
// New(opts).Handler() is the bare http.Handler, for serving it yourself;
// (*Sim).InMemory serves it without a network port.
//
// A Flavor picks the dialect details that differ between providers: the name
// of the reasoning field on the OpenAI-style path ("reasoning_content", or
// "reasoning" for Ollama /v1), usage shapes (DeepSeek cache counters, Qwen's
// "usage": null on early chunks). Preset(flavor) also switches on that
// provider's documented quirks (Faults); Options{Flavor: f} alone gives the
// clean dialect, and each Faults field can be set on its own.
//
// # Scripting answers
//
// When registers a Rule: a Match (what a request must look like) and a reply
// built with chained methods. Rules are tried in registration order; the
// first matching rule that is not used up answers. Requests that match no
// rule get the default answer: "[simulated] ..." text, reasoning when the
// request turned thinking on, and, when the request asks for JSON, a JSON
// value generated from the request's schema (or a small JSON object). A
// schema whose instance would exceed MaxInstanceBytes (a huge minLength or
// minItems, or nesting that multiplies them) gets a 400 instead.
//
//	// Tool calls when tools are offered and the user asks about BHP; text once
//	// the tool results are in (LastRole "tool" is tried first).
//	sim.When(providersim.Match{LastRole: "tool"}).Text("BHP trades at 45.10.")
//	sim.When(providersim.Match{WithTools: true, LastUserContains: "BHP"}).
//		ToolCall("get_stock_price", map[string]any{"ticker": "BHP"}).
//		ToolCall("get_financials", map[string]any{"ticker": "BHP", "period": "FY24"})
//
//	// Structured output: answer requests that ask for JSON with this value.
//	sim.When(providersim.Match{JSON: true}).JSON(map[string]any{"status": "RESOLVED"})
//
//	// Errors and faults.
//	sim.When(providersim.Match{}).Error(429, "rate limited").RetryAfter(time.Second).Times(2)
//	sim.When(providersim.Match{Streaming: true}).Text("partial").FailMidStream("model crashed")
//	sim.When(providersim.Match{}).Text("hello").Hang() // first chunk, then hold the stream open
//	sim.When(providersim.Match{}).Text("a long answer").Cut(3, providersim.CutReset) // 3 events, then RST
//
// Reply methods: Text, Reasoning, ToolCall, ToolCallWithID, JSON, Finish,
// Usage, Error, ErrorCode, RetryAfter, Raw (verbatim body lines), Delay,
// Hang, FailMidStream, Cut; rule controls: Times, Named. Embedding requests only
// match rules with Match.Endpoint == EndpointEmbed.
//
// # Inspecting what was sent
//
// Every request is recorded (unless Options.NoRecord): Requests returns them
// (ChatRequests only the chat ones, LastRequest the latest) in arrival order with method, path, headers, the decoded JSON body and a
// provider-neutral view (messages with roles, text, images as sent,
// reasoning, tool calls; tool names; the JSON mode; whether the request
// streams, asks for usage, turns thinking on). Rule.Hits counts the requests
// a rule answered; Count counts all chat requests; Disconnects counts
// streams the client abandoned before the end.
//
//	reqs := sim.Requests()
//	last := reqs[len(reqs)-1]
//	last.Body["stream_options"]       // wire-level assertion
//	last.Messages[1].Reasoning         // reasoning_content sent back
//	last.Messages[0].Images            // data URIs or Ollama base64 strings
//
// # Fault injection
//
// Options.Latency delays each response; Options.ChunkDelay spaces stream
// chunks; Faults reproduces each provider's documented behaviour: keep-alive
// comments and blank lines, usage on a chunk that still has choices, Qwen's
// empty ids on later tool deltas, interleaved parallel tool-call deltas,
// DeepSeek's blank JSON-mode content and its 400 when reasoning is not sent
// back after tool calls, Qwen's 400 for thinking without streaming, and
// more. The Ollama native path always sends tool arguments as objects and
// `done_reason: "stop"` after tool calls, as Ollama does.
//
// A Sim is safe for concurrent use.
package providersim
