package bm25

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/search/query"
)

func TestExpSpeed(t *testing.T) {
	if os.Getenv("EXP") == "" {
		t.Skip()
	}
	ctx := context.Background()
	ix, _ := Open(t.TempDir() + "/ix")
	r := rand.New(rand.NewPCG(5, 5))
	words := make([]string, 5000)
	for i := range words {
		words[i] = fmt.Sprintf("w%dx", i)
	}
	zipf := rand.NewZipf(r, 1.1, 2, uint64(len(words)-1))
	topics := make([][]string, 2000)
	for i := range topics {
		for j := 0; j < 30; j++ {
			topics[i] = append(topics[i], words[r.IntN(len(words))])
		}
	}
	subj := []string{"pay", "ledg", "chk", "srch", "auth", "inv", "notif", "bill"}
	n := 100000
	var docs []Doc
	for i := 0; i < n; i++ {
		tp := topics[(i/10)%2000]
		var ws []string
		ws = append(ws, subj[(i/10)%8], subj[r.IntN(8)])
		for j := 0; j < 60; j++ {
			if r.IntN(10) < 6 {
				ws = append(ws, tp[r.IntN(30)])
			} else {
				ws = append(ws, words[zipf.Uint64()])
			}
		}
		docs = append(docs, Doc{Key: fmt.Sprintf("c%06d", i), Text: strings.Join(ws, " ")})
		if len(docs) == 5000 {
			ix.Add(docs)
			docs = nil
		}
	}
	ix.Compact(ctx)
	var qs []string
	for i := 0; i < 300; i++ {
		d := r.IntN(n / 10)
		tp := topics[d%2000]
		qs = append(qs, fmt.Sprintf("%s %s %s %s", subj[d%8], tp[r.IntN(30)], tp[r.IntN(30)], tp[r.IntN(30)]))
	}
	run := func(name string, f func(q string)) {
		s := time.Now()
		for _, q := range qs {
			f(q)
		}
		fmt.Printf("%s: %v per query\n", name, time.Since(s)/time.Duration(len(qs)))
	}
	for round := 0; round < 2; round++ {
		run("bleve native", func(q string) {
			mq := query.NewMatchQuery(q)
			mq.SetField(fieldText)
			ix.idx.SearchInContext(ctx, bleve.NewSearchRequestOptions(mq, 50, 0, false))
		})
		run("exhaustive", func(q string) { ix.search(ctx, q, 50, nil, true) })
		dbgNext, dbgAdv, dbgSeedCands, dbgP = 0, 0, 0, 0
		run("maxscore", func(q string) { ix.search(ctx, q, 50, nil, false) })
		fmt.Println("next", dbgNext/300, "adv", dbgAdv/300, "seedcands", dbgSeedCands/300, "p@100", float64(dbgP)/300)
		var dfs []uint64
		adv, _ := ix.idx.Advanced()
		rd, _ := adv.Reader()
		terms, _, _ := ix.openTerms(ctx, rd, qs[0])
		for _, t := range terms {
			dfs = append(dfs, t.df)
		}
		closeTerms(terms)
		rd.Close()
		fmt.Println("dfs of q0", dfs, qs[0])
	}
}
