package openaiwire

import (
	"encoding/json"
	"reflect"
	"testing"
)

// chunkSeeds are stream events as providers send them, and edge cases of
// the JSON grammar and of encoding/json's rules.
var chunkSeeds = []string{
	`{"id":"c","object":"chat.completion.chunk","created":1,"model":"deepseek-chat","system_fingerprint":"fp","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
	`{"id":"c","choices":[{"index":0,"delta":{"content":"Hello \"world\"\n\u00e9\ud83d\ude00 \u2028 tab\t"},"finish_reason":null}]}`,
	`{"choices":[{"index":0,"delta":{"reasoning_content":"think","content":null}}]}`,
	`{"choices":[{"delta":{"reasoning":"ollama /v1 style"},"index":0}]}`,
	`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_price","arguments":""}},{"index":1,"id":"","type":"function","function":{"arguments":"{\"a\":"}}]}}]}`,
	`{"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"arguments":"1}"}}]}}]}`,
	`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
	`{"choices":[],"usage":{"prompt_tokens":42,"completion_tokens":9,"total_tokens":51,"prompt_cache_hit_tokens":32,"prompt_cache_miss_tokens":10,"prompt_tokens_details":{"cached_tokens":32,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":5}}}`,
	`{"choices":null,"usage":null}`,
	`{"error":{"message":"overloaded","type":"server_error","code":503}}`,
	`{"error":null}`,
	` {"model" : "m" , "choices" : [ null , {"index":1} ] } `,
	`null`, `{}`, `[]`, `"x"`, ``, `{`, `{"model":"a"} x`, `{"model":"a","model":"b"}`,
	`{"Model":"upper"}`, `{"MODEL":"a","model":"b"}`, `{"mode\u006c":"escaped key"}`, `{"modèl":"x"}`,
	`{"choices":[{"index":1.0}]}`, `{"choices":[{"index":"1"}]}`, `{"choices":[{"index":99999999999999999999}]}`, `{"choices":[{"index":-0}]}`, `{"choices":[{"index":01}]}`,
	`{"usage":{"prompt_tokens":1e3}}`, `{"usage":{"prompt_cache_hit_tokens":null}}`,
	`{"choices":[{"delta":{"content":"bad \xff utf8"}}]}`, `{"choices":[{"delta":{"content":"lone \ud800 surrogate"}}]}`,
	`{"choices":[{"delta":{"content":"pair split \ud83d\u0041"}}]}`, `{"choices":[{"delta":{"content":"bad escape \x"}}]}`,
	`{"choices":[{"delta":{"content":"ctl ` + "\x01" + `"}}]}`, `{"choices":[{"delta":{"content":"\u0000nul"}}]}`,
	`{"extra":{"a":[1,-2.5e-3,true,false,null,{"b":"\u0041"}]},"choices":[]}`,
	`{"extra":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
	`{"extra":-}`, `{"extra":1.}`, `{"extra":.5}`, `{"extra":1e}`, `{"extra":tru}`,
	`{"choices":[{"delta":{"tool_calls":null}}]}`, `{"choices":[{"delta":{"tool_calls":[null,{"index":null,"function":null}]}}]}`,
}

func FuzzDecodeChunk(f *testing.F) {
	for _, s := range chunkSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want, got StreamChunk
		wantErr := json.Unmarshal(data, &want)
		gotErr := DecodeChunk(data, &got)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("%q: encoding/json error %v, DecodeChunk error %v", data, wantErr, gotErr)
		}
		if wantErr == nil && !reflect.DeepEqual(want, got) {
			t.Fatalf("%q:\nencoding/json %+v\n  DecodeChunk %+v", data, want, got)
		}
	})
}

// TestDecodeChunkFastPath checks that what providers send is decoded by the
// scanner itself, not handed to encoding/json.
func TestDecodeChunkFastPath(t *testing.T) {
	for _, seed := range chunkSeeds[:11] {
		var c StreamChunk
		s := scanner{data: []byte(seed)}
		if !s.chunk(&c) || !s.end() {
			t.Errorf("fell back on %s", seed)
		}
	}
}

var responseSeeds = []string{
	`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"deepseek-chat","choices":[{"index":0,"message":{"role":"assistant","content":"BHP trades at 45.10 AUD.\nUp \"2%\"","reasoning_content":"The price came back."},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":180,"completion_tokens":40,"total_tokens":220,"prompt_cache_hit_tokens":128,"prompt_cache_miss_tokens":52,"completion_tokens_details":{"reasoning_tokens":12}},"system_fingerprint":"fp"}`,
	`{"id":"x","model":"qwen-plus","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_price","arguments":"{\"ticker\":\"BHP\"}"}},{"id":"","type":"function","function":{"name":"f","arguments":""}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":0}}}`,
	`{"choices":[{"message":{"content":"ollama","reasoning":"r"},"finish_reason":"stop"}]}`,
	`{"error":{"message":"bad","code":400}}`, `{"choices":[]}`, `{"choices":[null,{"message":null}]}`,
	`{"choices":[{"message":{"tool_calls":[null,{"function":null}]}}]}`, `{"choices":[{"finish_reason":null,"message":{"role":null}}]}`,
	`{"Choices":[]}`, `{"id":"a","id":"b"}`, `{"choices":[{"index":"0"}]}`, `{"choices":[{"message":{"content":5}}]}`, `{"usage":{"total_tokens":-1}}`,
}

func FuzzDecodeChatResponse(f *testing.F) {
	for _, s := range append(responseSeeds, chunkSeeds...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want, got ChatResponse
		wantErr := json.Unmarshal(data, &want)
		gotErr := DecodeChatResponse(data, &got)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("%q: encoding/json error %v, DecodeChatResponse error %v", data, wantErr, gotErr)
		}
		if wantErr == nil && !reflect.DeepEqual(want, got) {
			t.Fatalf("%q:\nencoding/json %+v\n  DecodeChatResponse %+v", data, want, got)
		}
	})
}

func TestDecodeChatResponseFastPath(t *testing.T) {
	for _, seed := range responseSeeds[:8] {
		var r ChatResponse
		s := scanner{data: []byte(seed)}
		if !s.response(&r) || !s.end() {
			t.Errorf("fell back on %s", seed)
		}
	}
}
