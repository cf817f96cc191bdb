package openaiwire

import (
	"encoding/json"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// DecodeChunk decodes one stream event into c (which should be zero), with
// the result encoding/json would give.
//
// Streams are decoded event by event, ten to hundreds per answer, and
// reflection-based decoding was the largest single cost of a streamed call
// in the gateway. A scanner that knows the chunk's shape handles what
// providers actually send; anything it does not expect (an unknown-case key,
// a duplicate key, a type mismatch, invalid UTF-8, deep nesting) hands the
// whole event to encoding/json instead, so the two never disagree:
// FuzzDecodeChunk holds them to it.
func DecodeChunk(data []byte, c *StreamChunk) error {
	s := scanner{data: data}
	if s.chunk(c) && s.end() {
		return nil
	}
	*c = StreamChunk{}
	return json.Unmarshal(data, c)
}

// scanner reads JSON from data. Each method returns false when the input is
// not the simple well-formed JSON it handles; the caller then falls back.
type scanner struct {
	data  []byte
	i     int
	depth int
}

const maxSkipDepth = 64

func (s *scanner) ws() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) end() bool {
	s.ws()
	return s.i == len(s.data)
}

// peek returns the next non-space byte, or 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.i < len(s.data) {
		return s.data[s.i]
	}
	return 0
}

func (s *scanner) literal(lit string) bool {
	if len(s.data)-s.i >= len(lit) && string(s.data[s.i:s.i+len(lit)]) == lit {
		s.i += len(lit)
		return true
	}
	return false
}

// null consumes a null literal if one is next.
func (s *scanner) null() bool {
	return s.peek() == 'n' && s.literal("null")
}

// members reads an object, or null (which leaves the target as it was, as
// encoding/json does for a struct), reading each key with key and calling
// value with the scanner at the member's value.
func (s *scanner) members(key func() ([]byte, bool), value func(key []byte) bool) bool {
	if s.null() {
		return true
	}
	if s.peek() != '{' {
		return false
	}
	s.i++
	if s.peek() == '}' {
		s.i++
		return true
	}
	for {
		if s.peek() != '"' {
			return false
		}
		k, ok := key()
		if !ok || s.peek() != ':' {
			return false
		}
		s.i++
		if !value(k) {
			return false
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return true
		default:
			return false
		}
	}
}

// object reads an object (or null) into a struct, calling member for each
// known key with the scanner at the value and skipping the others. Keys
// must be unique and match the known ones exactly, so no case-insensitive
// or duplicate-key rule of encoding/json comes into play.
func (s *scanner) object(known []string, member func(key string) bool) bool {
	var seen uint64
	return s.members(s.rawString, func(key []byte) bool {
		for j, k := range known {
			if string(key) == k {
				if seen&(1<<j) != 0 {
					return false
				}
				seen |= 1 << j
				return member(k)
			}
		}
		return !foldsToAny(key, known) && s.skip()
	})
}

// foldsToAny reports whether key would match a known key under
// encoding/json's case-insensitive matching (or is not plain ASCII, where
// that matching also folds some non-ASCII letters).
func foldsToAny(key []byte, known []string) bool {
	for _, c := range key {
		if c >= utf8.RuneSelf || c == '\\' {
			return true
		}
	}
	for _, k := range known {
		if len(k) == len(key) {
			eq := true
			for j := range key {
				a, b := key[j], k[j]
				if 'A' <= a && a <= 'Z' {
					a += 'a' - 'A'
				}
				if a != b {
					eq = false
					break
				}
			}
			if eq {
				return true
			}
		}
	}
	return false
}

// array reads an array or null, calling elem for each element.
func (s *scanner) array(elem func() bool) bool {
	if s.null() {
		return true
	}
	if s.peek() != '[' {
		return false
	}
	s.i++
	if s.peek() == ']' {
		s.i++
		return true
	}
	for {
		if !elem() {
			return false
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return true
		default:
			return false
		}
	}
}

// rawString reads a string without escapes or non-ASCII bytes (keys).
func (s *scanner) rawString() ([]byte, bool) {
	s.i++ // opening quote
	start := s.i
	for s.i < len(s.data) {
		c := s.data[s.i]
		switch {
		case c == '"':
			s.i++
			return s.data[start : s.i-1], true
		case c < 0x20 || c == '\\' || c >= utf8.RuneSelf:
			return nil, false
		}
		s.i++
	}
	return nil, false
}

// str reads a string value, decoding escapes as encoding/json does.
func (s *scanner) str() (string, bool) {
	if s.peek() != '"' {
		return "", false
	}
	s.i++
	start := s.i
	ascii := true
	for s.i < len(s.data) {
		c := s.data[s.i]
		switch {
		case c == '"':
			b := s.data[start:s.i]
			s.i++
			if !ascii && !utf8.Valid(b) {
				return "", false // encoding/json substitutes U+FFFD
			}
			return string(b), true
		case c == '\\':
			return s.escapedString(start)
		case c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			ascii = false
		}
		s.i++
	}
	return "", false
}

// escapedString continues a string that has escapes, from s.i at the
// first backslash.
func (s *scanner) escapedString(start int) (string, bool) {
	buf := make([]byte, 0, s.i-start+16)
	buf = append(buf, s.data[start:s.i]...)
	for s.i < len(s.data) {
		c := s.data[s.i]
		switch {
		case c == '"':
			s.i++
			if !utf8.Valid(buf) {
				return "", false
			}
			return string(buf), true
		case c < 0x20:
			return "", false
		case c != '\\':
			buf = append(buf, c)
			s.i++
			continue
		}
		if s.i+1 >= len(s.data) {
			return "", false
		}
		e := s.data[s.i+1]
		s.i += 2
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := s.hex4()
			if !ok {
				return "", false
			}
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if s.i+1 < len(s.data) && s.data[s.i] == '\\' && s.data[s.i+1] == 'u' {
					save := s.i
					s.i += 2
					if r2, ok = s.hex4(); !ok {
						return "", false
					}
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						buf = utf8.AppendRune(buf, dec)
						continue
					}
					s.i = save // not a pair: the second escape stands alone
				}
				r = utf8.RuneError
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return "", false
		}
	}
	return "", false
}

func (s *scanner) hex4() (rune, bool) {
	if s.i+4 > len(s.data) {
		return 0, false
	}
	var r rune
	for _, c := range s.data[s.i : s.i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	s.i += 4
	return r, true
}

// optional reads null (setting *p to nil) or a value into a new T, as
// encoding/json does for a pointer field.
func optional[T any](s *scanner, p **T, read func(*T) bool) bool {
	if s.null() {
		*p = nil
		return true
	}
	*p = new(T)
	return read(*p)
}

// list reads an array into *p as encoding/json does for a slice: null is
// nil, [] is empty (not nil), each element read by elem.
func list[T any](s *scanner, p *[]T, elem func(*T) bool) bool {
	*p = nil
	if s.peek() == '[' {
		*p = []T{}
	}
	return s.array(func() bool {
		*p = append(*p, *new(T))
		return elem(&(*p)[len(*p)-1])
	})
}

// stringField reads a string or null (which leaves *p as it was).
func (s *scanner) stringField(p *string) bool {
	if s.null() {
		return true
	}
	v, ok := s.str()
	if ok {
		*p = v
	}
	return ok
}

// integer reads a plain integer literal (no fraction or exponent, which
// encoding/json refuses for integer fields).
func (s *scanner) integer() (int64, bool) {
	s.ws()
	start := s.i
	if s.i < len(s.data) && s.data[s.i] == '-' {
		s.i++
	}
	digits := s.i
	for s.i < len(s.data) && '0' <= s.data[s.i] && s.data[s.i] <= '9' {
		s.i++
	}
	if s.i == digits || (s.data[digits] == '0' && s.i-digits > 1) {
		return 0, false
	}
	if s.i < len(s.data) {
		switch s.data[s.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	n, err := strconv.ParseInt(string(s.data[start:s.i]), 10, 64)
	return n, err == nil
}

// int64Field reads an integer or null (which leaves *p as it was).
func (s *scanner) int64Field(p *int64) bool {
	if s.null() {
		return true
	}
	n, ok := s.integer()
	if ok {
		*p = n
	}
	return ok
}

func (s *scanner) intField(p *int) bool {
	if s.null() {
		return true
	}
	n, ok := s.integer()
	if !ok || int64(int(n)) != n {
		return false
	}
	*p = int(n)
	return true
}

// skip reads and discards any valid JSON value.
func (s *scanner) skip() bool {
	switch s.peek() {
	case '{', '[':
		if s.depth++; s.depth > maxSkipDepth {
			return false
		}
		var ok bool
		if s.peek() == '{' {
			ok = s.members(s.anyKey, func([]byte) bool { return s.skip() })
		} else {
			ok = s.array(s.skip)
		}
		s.depth--
		return ok
	case '"':
		_, ok := s.str()
		return ok
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	default:
		return s.number()
	}
}

// anyKey reads a key of an object being skipped: any valid string.
func (s *scanner) anyKey() ([]byte, bool) {
	_, ok := s.str()
	return nil, ok
}

// number reads a JSON number.
func (s *scanner) number() bool {
	d := s.data
	i := s.i
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(d) && d[i] == '.' {
		i++
		j := i
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
		if i == j {
			return false
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		j := i
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
		if i == j {
			return false
		}
	}
	s.i = i
	return true
}

// raw captures any valid JSON value as json.RawMessage does.
func (s *scanner) raw(p *json.RawMessage) bool {
	s.ws()
	start := s.i
	if !s.skip() {
		return false
	}
	*p = append(json.RawMessage(nil), s.data[start:s.i]...)
	return true
}

var (
	chunkKeys    = []string{"model", "choices", "usage", "error"}
	choiceKeys   = []string{"index", "delta", "finish_reason"}
	deltaKeys    = []string{"content", "reasoning_content", "reasoning", "tool_calls"}
	toolKeys     = []string{"index", "id", "type", "function"}
	functionKeys = []string{"name", "arguments"}
	usageKeys    = []string{"prompt_tokens", "completion_tokens", "total_tokens", "prompt_cache_hit_tokens", "prompt_cache_miss_tokens", "prompt_tokens_details", "completion_tokens_details"}
)

func (s *scanner) chunk(c *StreamChunk) bool {
	return s.object(chunkKeys, func(key string) bool {
		switch key {
		case "model":
			return s.stringField(&c.Model)
		case "choices":
			return list(s, &c.Choices, s.choice)
		case "usage":
			return optional(s, &c.Usage, s.usage)
		default: // error
			return s.raw(&c.Error)
		}
	})
}

func (s *scanner) choice(ch *StreamChoice) bool {
	return s.object(choiceKeys, func(key string) bool {
		switch key {
		case "index":
			return s.intField(&ch.Index)
		case "delta":
			return s.delta(&ch.Delta)
		default: // finish_reason
			return optional(s, &ch.FinishReason, s.stringField)
		}
	})
}

func (s *scanner) delta(d *Delta) bool {
	return s.object(deltaKeys, func(key string) bool {
		switch key {
		case "content":
			return optional(s, &d.Content, s.stringField)
		case "reasoning_content":
			return optional(s, &d.ReasoningContent, s.stringField)
		case "reasoning":
			return optional(s, &d.Reasoning, s.stringField)
		default: // tool_calls
			return list(s, &d.ToolCalls, s.toolCallDelta)
		}
	})
}

func (s *scanner) toolCallDelta(t *ToolCallDelta) bool {
	return s.object(toolKeys, func(key string) bool {
		switch key {
		case "index":
			return optional(s, &t.Index, s.intField)
		case "id":
			return s.stringField(&t.ID)
		case "type":
			return s.stringField(&t.Type)
		default: // function
			return s.object(functionKeys, func(key string) bool {
				if key == "name" {
					return optional(s, &t.Function.Name, s.stringField)
				}
				return optional(s, &t.Function.Arguments, s.stringField)
			})
		}
	})
}

func (s *scanner) usage(u *Usage) bool {
	return s.object(usageKeys, func(key string) bool {
		switch key {
		case "prompt_tokens":
			return s.int64Field(&u.PromptTokens)
		case "completion_tokens":
			return s.int64Field(&u.CompletionTokens)
		case "total_tokens":
			return s.int64Field(&u.TotalTokens)
		case "prompt_cache_hit_tokens":
			return optional(s, &u.PromptCacheHitTokens, s.int64Field)
		case "prompt_cache_miss_tokens":
			return optional(s, &u.PromptCacheMissTokens, s.int64Field)
		case "prompt_tokens_details":
			return optional(s, &u.PromptTokensDetails, func(d *PromptDetails) bool {
				return s.object([]string{"cached_tokens"}, func(string) bool { return s.int64Field(&d.CachedTokens) })
			})
		default: // completion_tokens_details
			return optional(s, &u.CompletionTokensDetails, func(d *CompletionsDetails) bool {
				return s.object([]string{"reasoning_tokens"}, func(string) bool { return s.int64Field(&d.ReasoningTokens) })
			})
		}
	})
}

// DecodeChatResponse decodes a non-streaming answer into r (which should be
// zero) as DecodeChunk does a stream event: the scanner for what providers
// send, encoding/json for anything else.
func DecodeChatResponse(data []byte, r *ChatResponse) error {
	s := scanner{data: data}
	if s.response(r) && s.end() {
		return nil
	}
	*r = ChatResponse{}
	return json.Unmarshal(data, r)
}

var (
	responseKeys = []string{"id", "model", "choices", "usage", "error"}
	answerKeys   = []string{"index", "message", "finish_reason"}
	messageKeys  = []string{"role", "content", "reasoning_content", "reasoning", "tool_calls"}
	callKeys     = []string{"id", "type", "function"}
)

func (s *scanner) response(r *ChatResponse) bool {
	return s.object(responseKeys, func(key string) bool {
		switch key {
		case "id":
			return s.stringField(&r.ID)
		case "model":
			return s.stringField(&r.Model)
		case "choices":
			return list(s, &r.Choices, s.answer)
		case "usage":
			return optional(s, &r.Usage, s.usage)
		default: // error
			return s.raw(&r.Error)
		}
	})
}

func (s *scanner) answer(c *Choice) bool {
	return s.object(answerKeys, func(key string) bool {
		switch key {
		case "index":
			return s.intField(&c.Index)
		case "finish_reason":
			return s.stringField(&c.FinishReason)
		default: // message
			return s.message(&c.Message)
		}
	})
}

func (s *scanner) message(m *ResponseMessage) bool {
	return s.object(messageKeys, func(key string) bool {
		switch key {
		case "role":
			return s.stringField(&m.Role)
		case "content":
			return optional(s, &m.Content, s.stringField)
		case "reasoning_content":
			return s.stringField(&m.ReasoningContent)
		case "reasoning":
			return s.stringField(&m.Reasoning)
		default: // tool_calls
			return list(s, &m.ToolCalls, s.toolCall)
		}
	})
}

func (s *scanner) toolCall(tc *ToolCall) bool {
	return s.object(callKeys, func(key string) bool {
		switch key {
		case "id":
			return s.stringField(&tc.ID)
		case "type":
			return s.stringField(&tc.Type)
		default: // function
			return s.object(functionKeys, func(key string) bool {
				if key == "name" {
					return s.stringField(&tc.Function.Name)
				}
				return s.stringField(&tc.Function.Arguments)
			})
		}
	})
}
