// Package synthetic generates deterministic chunk texts, their embeddings
// and queries at any scale, for benchmarks: operational prose about
// services and incidents with a Zipf-distributed vocabulary, so term
// statistics and vector neighbourhoods look like a real corpus rather than
// uniform noise.
package synthetic

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"

	"github.com/agentmesh/agentmesh/services/indexer/internal/embed"
	"github.com/agentmesh/agentmesh/services/indexer/internal/hybrid"
)

var (
	subjects = []string{"payments", "ledger", "checkout", "search", "auth", "inventory", "notifications", "billing", "recommendations",
		"shipping", "orders", "catalogue", "pricing", "fraud", "identity", "analytics", "reporting", "gateway", "scheduler", "storage"}
	issues = []string{"timeout", "latency", "memory", "leak", "certificate", "disk", "deadlock", "throttling", "dns", "lag", "migration",
		"cache", "crash", "restart", "rollback", "outage", "degradation", "error", "retry", "failover"}
	actions = []string{"deployed", "rolled back", "restarted", "scaled", "patched", "investigated", "monitored", "escalated", "mitigated", "documented"}
)

// vocab is a pseudo-English vocabulary drawn from syllables; words are
// picked with a Zipf distribution, like real text.
var vocab = func() []string {
	syl := []string{"ka", "ro", "mi", "ten", "sa", "lo", "ver", "di", "an", "pe", "tor", "gu", "ne", "fi", "mar", "cho", "bel", "us", "ri", "dem"}
	r := rand.New(rand.NewPCG(7, 7))
	seen := map[string]bool{}
	var out []string
	for len(out) < 5000 {
		n := 2 + r.IntN(3)
		var b strings.Builder
		for range n {
			b.WriteString(syl[r.IntN(len(syl))])
		}
		if w := b.String(); !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	return out
}()

// topics is how many topics the corpus has; each has its own words, and
// a document's chunks draw most of their words from its topic, the way
// real documents repeat their subject's vocabulary.
const topics = 2000

// topicWords are the words of each topic, drawn once from the vocabulary.
var topicWords = func() [][]string {
	r := rand.New(rand.NewPCG(11, 11))
	out := make([][]string, topics)
	for i := range out {
		for range 30 {
			out[i] = append(out[i], vocab[r.IntN(len(vocab))])
		}
	}
	return out
}()

// gen produces texts from one seed.
type gen struct {
	r    *rand.Rand
	zipf *rand.Zipf
}

func newGen(seed uint64) *gen {
	r := rand.New(rand.NewPCG(seed, seed*31+1))
	return &gen{r: r, zipf: rand.NewZipf(r, 1.1, 2, uint64(len(vocab)-1))}
}

func (g *gen) pick(xs []string) string { return xs[g.r.IntN(len(xs))] }

// text is one chunk of document i/10: a few sentences about its subject
// and issue, with words of its topic (60%) and of the whole vocabulary
// (40%, Zipf-distributed).
func (g *gen) text(i int) (string, string) {
	doc := i / 10
	topic := topicWords[doc%topics]
	subj, iss := subjects[doc%len(subjects)], issues[(doc/len(subjects))%len(issues)]
	var b strings.Builder
	fmt.Fprintf(&b, "The %s service saw %s after release %d.%d. ", subj, iss, i%7, i%13)
	sentences := 3 + g.r.IntN(5)
	for range sentences {
		n := 8 + g.r.IntN(10)
		words := make([]string, 0, n+2)
		for range n {
			if g.r.IntN(10) < 6 {
				words = append(words, topic[g.r.IntN(len(topic))])
			} else {
				words = append(words, vocab[g.zipf.Uint64()])
			}
		}
		if g.r.IntN(3) == 0 {
			words = append(words, g.pick(actions), g.pick(subjects))
		}
		if g.r.IntN(3) == 0 {
			words = append(words, g.pick(issues))
		}
		b.WriteString(strings.ToUpper(words[0][:1]) + words[0][1:] + " " + strings.Join(words[1:], " ") + ". ")
	}
	return strings.TrimSpace(b.String()), subj
}

// Chunks returns n chunks of docs of 10 chunks each, embedded with the
// local embedder (in parallel). Source types cycle 1..5.
func Chunks(n int, seed uint64) []hybrid.Chunk {
	out := make([]hybrid.Chunk, n)
	workers := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	per := (n + workers - 1) / workers
	for w := range workers {
		wg.Go(func() {
			g := newGen(seed + uint64(w))
			e := embed.LocalHash{}
			for i := w * per; i < min(n, (w+1)*per); i++ {
				txt, subj := g.text(i)
				out[i] = hybrid.Chunk{Key: fmt.Sprintf("c%07d", i), Doc: fmt.Sprintf("d%06d", i/10), Title: subj + " notes",
					Text: txt, SourceType: int32(1 + i%5), ContentType: "wiki", Vector: e.Vector(txt)}
			}
		})
	}
	wg.Wait()
	return out
}

// Queries returns n short queries like users type about one document of
// a corpus of docs documents: its subject, its issue and three words of
// its topic.
func Queries(n, docs int, seed uint64) []string {
	g := newGen(seed ^ 0xabcdef)
	out := make([]string, n)
	for i := range out {
		doc := g.r.IntN(docs)
		topic := topicWords[doc%topics]
		out[i] = fmt.Sprintf("%s %s %s %s %s", subjects[doc%len(subjects)], issues[(doc/len(subjects))%len(issues)],
			topic[g.r.IntN(len(topic))], topic[g.r.IntN(len(topic))], topic[g.r.IntN(len(topic))])
	}
	return out
}
