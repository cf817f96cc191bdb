package tools

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Canonical returns the canonical JSON text of raw: object keys sorted, no
// insignificant whitespace, no HTML escaping, and numbers in one spelling (an
// integral value in the safe integer range is written without a fraction or
// exponent, so 1, 1.0 and 1e0 are the same argument). Two argument objects
// that mean the same thing have the same canonical text, which is what
// makes an idempotency key stable across model calls and restarts.
//
// raw must hold exactly one JSON value; trailing data is an error.
func Canonical(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	if dec.More() {
		return nil, errors.New("canonical json: trailing data after the value")
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("canonical json: trailing data after the value")
	}
	v, err := normaliseNumbers(v)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	// encoding/json writes map keys sorted, which is the canonical order.
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// maxSafeInteger is 2^53: every integer up to it is exact in a float64.
const maxSafeInteger = 1 << 53

// normaliseNumbers rewrites every json.Number in v to its canonical spelling.
func normaliseNumbers(v any) (any, error) {
	switch x := v.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(x.String(), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("canonical json: number %s out of range", x)
		}
		if f == math.Trunc(f) && math.Abs(f) <= maxSafeInteger {
			return json.Number(strconv.FormatInt(int64(f), 10)), nil
		}
		return json.Number(strconv.FormatFloat(f, 'g', -1, 64)), nil
	case map[string]any:
		for k, e := range x {
			n, err := normaliseNumbers(e)
			if err != nil {
				return nil, err
			}
			x[k] = n
		}
		return x, nil
	case []any:
		for i, e := range x {
			n, err := normaliseNumbers(e)
			if err != nil {
				return nil, err
			}
			x[i] = n
		}
		return x, nil
	default:
		return v, nil
	}
}

// IdempotencyKey returns the idempotency key of a tool call of parentID:
// "<parentID>/<tool>/<sha256 of the canonical arguments, hex>". canonicalArgs
// must come from [Canonical] (or [Registry.Validate], which returns it), so
// the same call planned twice, or re-planned after a crash, has one key.
func IdempotencyKey(parentID, tool string, canonicalArgs []byte) string {
	sum := sha256.Sum256(canonicalArgs)
	return parentID + "/" + tool + "/" + hex.EncodeToString(sum[:])
}

// IsEmpty reports whether a tool's result carries no data: no value, null,
// an empty string, an empty object or an empty array. A tool that returns
// nothing is a data gap, not a data source.
func IsEmpty(data json.RawMessage) bool {
	t := bytes.TrimSpace(data)
	if len(t) == 0 {
		return true
	}
	switch string(t) {
	case "null", `""`:
		return true
	}
	var v any
	if err := json.Unmarshal(t, &v); err != nil {
		return false
	}
	switch x := v.(type) {
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	}
	return false
}
