// Package credentials holds provider API keys: read from configuration
// values and secret files, handed out in turn, and scrubbed from any text
// that might reach a log or an error.
package credentials

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
)

// Redacted replaces a key wherever Scrub finds it.
const Redacted = "[REDACTED]"

// KeyRing is a provider's set of API keys, used round-robin. The zero value
// and nil hold no keys. Safe for concurrent use.
type KeyRing struct {
	keys []string
	next atomic.Uint64
}

// Load builds a KeyRing from a comma-separated list of keys and from a file
// holding keys separated by commas or newlines (Kubernetes secret mounts).
// Either may be empty. The error names the file, never its content.
func Load(list, file string) (*KeyRing, error) {
	keys := split(list)
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("credentials: read key file %s: %w", file, err)
		}
		keys = append(keys, split(strings.ReplaceAll(string(b), "\n", ","))...)
	}
	return New(keys...), nil
}

// New builds a KeyRing from keys, skipping empty ones and duplicates.
func New(keys ...string) *KeyRing {
	seen := map[string]bool{}
	r := &KeyRing{}
	for _, k := range keys {
		k = strings.TrimSpace(k)
		if k == "" || seen[k] {
			continue
		}
		seen[k] = true
		r.keys = append(r.keys, k)
	}
	return r
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Len returns the number of keys.
func (r *KeyRing) Len() int {
	if r == nil {
		return 0
	}
	return len(r.keys)
}

// Next returns the next key in turn, "" if there are none.
func (r *KeyRing) Next() string {
	if r.Len() == 0 {
		return ""
	}
	return r.keys[r.NextIndex()]
}

// NextIndex returns the position (in All) of the next key in turn, -1 if
// there are none. Next and NextIndex share one turn.
func (r *KeyRing) NextIndex() int {
	if r.Len() == 0 {
		return -1
	}
	n := r.next.Add(1) - 1
	return int(n % uint64(len(r.keys)))
}

// All returns the keys in turn order.
func (r *KeyRing) All() []string {
	if r == nil {
		return nil
	}
	return slices.Clone(r.keys)
}

// Scrub returns s with every key replaced by Redacted.
func (r *KeyRing) Scrub(s string) string {
	if r.Len() == 0 {
		return s
	}
	for _, k := range r.keys {
		if strings.Contains(s, k) {
			s = strings.ReplaceAll(s, k, Redacted)
		}
	}
	return s
}

// String never shows the keys, so a KeyRing is safe to log.
func (r *KeyRing) String() string { return fmt.Sprintf("KeyRing(%d keys)", r.Len()) }

// Merge returns a KeyRing holding the keys of every ring, in order.
func Merge(rings ...*KeyRing) *KeyRing {
	var keys []string
	for _, r := range rings {
		if r != nil {
			keys = append(keys, r.keys...)
		}
	}
	return New(keys...)
}
