package embed

import (
	"context"
	"hash/fnv"
	"math"
	"strings"
	"unicode"
)

// LocalHashName names the built-in embedder's vector space.
const LocalHashName = "local-hash-384"

// LocalHashDimensions is the built-in embedder's vector length.
const LocalHashDimensions = 384

// LocalHash is the built-in embedder, for machines without an embedding
// model: it is not a neural model. It hashes features of the text into 384
// signed buckets (the "hashing trick"): stemmed words (weight 1), word
// bigrams (0.5, for phrases) and character trigrams of each word (0.5 per
// word, spread over its trigrams, so "payments" and "payment-api" still
// share most of their mass). Counts are dampened (1 + ln tf) and the vector
// is L2-normalised, so cosine similarity behaves like a TF-weighted bag of
// words and subwords. It is deterministic and needs no network.
type LocalHash struct{}

var _ Embedder = LocalHash{}

// Name returns LocalHashName.
func (LocalHash) Name() string { return LocalHashName }

// Dimensions returns LocalHashDimensions.
func (LocalHash) Dimensions() int { return LocalHashDimensions }

// Embed never fails.
func (l LocalHash) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		out[i] = l.Vector(t)
	}
	return out, nil
}

// Vector embeds one text.
func (LocalHash) Vector(text string) []float32 {
	feats := map[string]float64{}
	words := Tokens(text)
	for i, w := range words {
		feats["w:"+w]++
		if i > 0 {
			feats["b:"+words[i-1]+" "+w] += 0.5
		}
		padded := "^" + w + "$"
		rs := []rune(padded)
		if n := len(rs) - 2; n > 0 {
			per := 0.5 / float64(n)
			for j := 0; j+3 <= len(rs); j++ {
				feats["c:"+string(rs[j:j+3])] += per
			}
		}
	}
	v := make([]float32, LocalHashDimensions)
	if len(feats) == 0 {
		// Only stop words or punctuation: still a valid, stable direction.
		feats["raw:"+strings.TrimSpace(text)] = 1
	}
	for f, tf := range feats {
		h := fnv.New64a()
		h.Write([]byte(f))
		sum := h.Sum64()
		w := 1 + math.Log(1+tf) - math.Log(2) // 1 for a single occurrence, dampened above
		if tf < 1 {
			w = tf
		}
		if sum>>63 == 1 {
			w = -w
		}
		v[sum%LocalHashDimensions] += float32(w)
	}
	var norm float64
	for _, x := range v {
		norm += float64(x) * float64(x)
	}
	if norm == 0 {
		v[0] = 1
		return v
	}
	inv := float32(1 / math.Sqrt(norm))
	for i := range v {
		v[i] *= inv
	}
	return v
}

// Tokens lower-cases text, splits it into words of letters and digits,
// drops English stop words and strips common inflections.
func Tokens(text string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}) {
		if stopWords[f] {
			continue
		}
		out = append(out, stem(f))
	}
	return out
}

// stem strips a few English suffixes; it only needs to map inflections of
// one word to one feature, not to produce real stems.
func stem(w string) string {
	if len(w) <= 4 {
		return w
	}
	switch {
	case strings.HasSuffix(w, "ies"):
		return w[:len(w)-3] + "y"
	case strings.HasSuffix(w, "ing") && len(w) > 5:
		return w[:len(w)-3]
	case strings.HasSuffix(w, "ed") && len(w) > 5:
		return w[:len(w)-2]
	case strings.HasSuffix(w, "es") && strings.HasSuffix(w[:len(w)-2], "s"):
		return w[:len(w)-2]
	case strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && !strings.HasSuffix(w, "us"):
		return w[:len(w)-1]
	}
	return w
}

var stopWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`a an and are as at be been but by can could did do does for from had has have
		he her his i if in into is it its me my no not of on or our she so than that the their them then there
		these they this those to was we were what when where which while who why will with would you your
		about after all also am any because before being both each few how just more most other over own same
		should some such too under until up very all s t don`) {
		m[w] = true
	}
	return m
}()
