// Command evalcorpus generates the labelled retrieval corpus under
// testdata/eval: documents (e-mails, tickets, wiki pages, logs, reports)
// about operational incidents and company results, and queries with the
// ids of the documents judged relevant. It is deterministic (fixed seed);
// the generated files are committed, and cmd/eval reads them.
//
// Each topic is a (service, problem) pair or a company's results; every
// topic has several documents of different kinds that describe it with
// different words (synonym pools), and topics share services, problems
// and companies with each other, so a query must match both halves of its
// topic. Queries paraphrase rather than copy the documents' wording.
//
//	go run ./cmd/evalcorpus -out testdata/eval
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Doc is one corpus document.
type Doc struct {
	ID         string `json:"id"`
	SourceType string `json:"source_type"`
	Title      string `json:"title"`
	SourceURL  string `json:"source_url"`
	Text       string `json:"text"`
}

// Query is one judged query.
type Query struct {
	ID       string   `json:"id"`
	Text     string   `json:"text"`
	Relevant []string `json:"relevant"`
}

type service struct {
	name, team, lang string
	words            []string // what people call it
}

type problem struct {
	key     string
	symptom []string // how documents describe it
	query   []string // how people ask about it
	cause   []string
	fix     []string
	logLine []string
	metric  string
}

var services = []service{
	{"payments-api", "payments", "Go", []string{"payments API", "payment service", "payments-api"}},
	{"ledger", "payments", "Java", []string{"ledger", "ledger service", "accounting ledger"}},
	{"checkout", "storefront", "TypeScript", []string{"checkout", "checkout flow", "checkout service"}},
	{"search-indexer", "discovery", "Go", []string{"search indexer", "catalogue indexing job", "search-indexer"}},
	{"auth-gateway", "identity", "Go", []string{"auth gateway", "login service", "authentication gateway"}},
	{"inventory", "fulfilment", "Kotlin", []string{"inventory service", "stock service", "inventory"}},
	{"notifications", "engagement", "Python", []string{"notification service", "push notifications", "notifications"}},
	{"billing", "finance-eng", "Java", []string{"billing", "invoicing service", "billing service"}},
	{"recommendations", "discovery", "Python", []string{"recommendation engine", "recs service", "recommendations"}},
	{"shipping-rates", "fulfilment", "Go", []string{"shipping rates API", "carrier rates service", "shipping-rates"}},
}

var problems = []problem{
	{"timeout", []string{"requests timed out", "calls exceeded their deadline", "p99 latency spiked and clients gave up"},
		[]string{"slow responses and timeouts", "deadline exceeded errors", "latency"},
		[]string{"a connection pool that was too small", "a slow downstream dependency", "retries amplifying load"},
		[]string{"raised the connection pool size", "added a circuit breaker", "tuned client deadlines"},
		[]string{"ERROR rpc deadline exceeded after 5000ms", "WARN upstream call slow: 4870ms", "ERROR context deadline exceeded"}, "latency_p99_ms"},
	{"memory", []string{"pods were OOMKilled", "memory usage grew until the container was killed", "heap kept growing"},
		[]string{"out of memory crashes", "memory leak", "pods restarting OOM"},
		[]string{"an unbounded in-process cache", "a goroutine leak", "large batch buffers"},
		[]string{"bounded the cache", "fixed the leak and added a heap alert", "streamed the batches"},
		[]string{"ERROR container killed: OOMKilled", "WARN heap in use 3.8GiB of 4GiB", "FATAL runtime: out of memory"}, "memory_rss_bytes"},
	{"certificate", []string{"TLS handshakes failed because the certificate expired", "clients rejected the expired certificate", "x509 errors appeared"},
		[]string{"expired TLS cert", "SSL certificate expiry", "x509 handshake failures"},
		[]string{"a certificate renewal job that silently failed", "a cert-manager misconfiguration", "a missed manual rotation"},
		[]string{"rotated the certificate", "fixed the renewal job and added expiry alerts", "moved to automatic rotation"},
		[]string{"ERROR x509: certificate has expired or is not yet valid", "ERROR tls: bad certificate", "WARN certificate expires in 2 days"}, "tls_handshake_errors"},
	{"disk", []string{"the volume filled up", "writes failed with no space left on device", "disk usage hit 100%"},
		[]string{"disk full", "no space left on device", "storage exhausted"},
		[]string{"log rotation that stopped working", "an ever-growing temp directory", "snapshots that were never pruned"},
		[]string{"cleaned up and resized the volume", "fixed log rotation", "added a pruning cron job"},
		[]string{"ERROR write /data/segment-0042: no space left on device", "WARN disk usage 97%", "ERROR failed to flush: ENOSPC"}, "disk_used_percent"},
	{"deadlock", []string{"transactions deadlocked", "the database reported lock waits and deadlocks", "writes hung on row locks"},
		[]string{"database deadlocks", "lock contention", "stuck transactions"},
		[]string{"two code paths taking locks in opposite order", "a long-running migration holding locks", "missing index causing lock escalation"},
		[]string{"made lock ordering consistent", "split the migration", "added the missing index"},
		[]string{"ERROR deadlock detected; transaction rolled back", "WARN lock wait timeout exceeded", "ERROR could not obtain lock on row"}, "db_lock_waits"},
	{"ratelimit", []string{"the provider started returning HTTP 429", "we were throttled by the upstream API", "requests were rate limited"},
		[]string{"429 too many requests", "throttling by upstream", "rate limit errors"},
		[]string{"a retry storm without backoff", "a quota that was lowered", "a batch job sharing the API key"},
		[]string{"added exponential backoff", "asked the vendor for a higher quota", "moved the batch job to its own key"},
		[]string{"WARN upstream returned 429 Too Many Requests", "ERROR rate limit exceeded, retry after 30s", "WARN backing off 8s"}, "http_429_total"},
	{"dns", []string{"name resolution failed", "DNS lookups returned SERVFAIL", "hosts could not be resolved"},
		[]string{"DNS resolution errors", "cannot resolve host", "SERVFAIL lookups"},
		[]string{"an overloaded CoreDNS", "a bad resolver config pushed by automation", "ndots settings causing search domain storms"},
		[]string{"scaled CoreDNS", "reverted the resolver config", "lowered ndots"},
		[]string{"ERROR dial tcp: lookup db.internal: no such host", "WARN dns query timeout", "ERROR lookup failed: SERVFAIL"}, "dns_errors_total"},
	{"kafka", []string{"consumer lag grew to millions of messages", "the consumer group fell behind", "events were processed hours late"},
		[]string{"kafka consumer lag", "event processing delay", "queue backlog"},
		[]string{"a rebalance loop", "a slow handler blocking the partition", "too few partitions for the load"},
		[]string{"fixed the rebalance settings", "made the handler asynchronous", "added partitions"},
		[]string{"WARN consumer group lag 2100000", "ERROR rebalance in progress", "WARN poll interval exceeded"}, "consumer_lag"},
	{"migration", []string{"the schema migration failed half way", "a database migration left the table inconsistent", "the deploy's migration step errored"},
		[]string{"failed schema migration", "database migration error", "broken migration"},
		[]string{"a non-idempotent migration", "a column type change on a huge table", "migrations run by two pods at once"},
		[]string{"made the migration idempotent", "used an online schema change", "added a migration lock"},
		[]string{"ERROR migration 0042_add_column failed: duplicate column", "ERROR relation already exists", "WARN migration lock held by another instance"}, "migration_failures"},
	{"cache", []string{"the cache stampeded after a flush", "cache misses overwhelmed the database", "hit ratio collapsed"},
		[]string{"cache stampede", "low cache hit rate", "redis miss storm"},
		[]string{"a full cache flush during peak", "keys expiring at the same time", "a Redis failover"},
		[]string{"added request coalescing", "jittered the TTLs", "warmed the cache before switching"},
		[]string{"WARN cache hit ratio 0.12", "ERROR redis connection reset", "WARN db connections saturated 200/200"}, "cache_hit_ratio"},
}

var regions = []string{"eu-west-1", "us-east-1", "ap-southeast-2", "eu-central-1"}
var people = []string{"Ana Silva", "Bo Chen", "Priya Natarajan", "Tomás Ortega", "Yuki Tanaka", "Omar Haddad", "Lena Fischer", "Sam Okafor"}

type company struct{ name, ticker, sector, exchange string }

var companies = []company{
	{"BHP Group", "BHP", "mining", "ASX"}, {"Rio Tinto", "RIO", "mining", "ASX"}, {"Fortescue", "FMG", "iron ore", "ASX"},
	{"Commonwealth Bank", "CBA", "banking", "ASX"}, {"CSL", "CSL", "biotech", "ASX"}, {"Woolworths", "WOW", "retail", "ASX"},
	{"Telstra", "TLS", "telecommunications", "ASX"}, {"Wesfarmers", "WES", "conglomerate", "ASX"}, {"Macquarie", "MQG", "investment banking", "ASX"},
	{"Woodside", "WDS", "energy", "ASX"},
}

type gen struct {
	r       *rand.Rand
	docs    []Doc
	queries []Query
}

func (g *gen) pick(xs []string) string { return xs[g.r.IntN(len(xs))] }

func (g *gen) add(st, title, text string) string {
	id := fmt.Sprintf("d%03d", len(g.docs)+1)
	g.docs = append(g.docs, Doc{ID: id, SourceType: st, Title: title, SourceURL: "https://corp.example.com/" + st + "/" + id, Text: text})
	return id
}

func main() {
	out := flag.String("out", "testdata/eval", "output directory")
	flag.Parse()
	g := &gen{r: rand.New(rand.NewPCG(42, 2024))}
	// 40 operational topics: every service with four problems, shifted so
	// every problem appears with four services.
	topic := 0
	for si, svc := range services {
		for k := 0; k < 4; k++ {
			p := problems[(si+k*3)%len(problems)]
			topic++
			g.opsTopic(topic, svc, p)
		}
	}
	for ci, c := range companies {
		g.companyTopic(ci+1, c)
	}
	g.noise(25)
	if err := write(*out, g); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("wrote %d documents and %d queries to %s\n", len(g.docs), len(g.queries), *out)
}

func (g *gen) opsTopic(n int, svc service, p problem) {
	region := g.pick(regions)
	owner, reporter := g.pick(people), g.pick(people)
	key := fmt.Sprintf("%s-%d", strings.ToUpper(svc.team[:3]), 100+n*7)
	version := fmt.Sprintf("%d.%d.%d", 1+n%4, n%9, n%5)
	sym, cause, fix := g.pick(p.symptom), g.pick(p.cause), g.pick(p.fix)
	var rel []string

	// Ticket.
	rel = append(rel, g.add("ticket", fmt.Sprintf("%s: %s in %s", key, title(g.pick(p.query)), svc.name), fmt.Sprintf(
		"%s\nStatus: %s\nPriority: %s\nAssignee: %s\nReporter: %s\nComponent: %s\n\nAfter release %s of the %s, %s in %s. "+
			"Customers of the %s team noticed failures within minutes.\n\nSteps to reproduce\n1. Send normal production traffic to %s.\n2. Watch the %s metric.\n\n"+
			"Expected: the service stays healthy.\nActual: %s.",
		key, g.pick([]string{"Open", "In Progress", "Resolved", "Closed"}), g.pick([]string{"P1", "P2", "High", "Medium"}), owner, reporter, svc.name,
		version, g.pick(svc.words), sym, region, svc.team, svc.name, p.metric, sym)))

	// E-mail.
	rel = append(rel, g.add("email", fmt.Sprintf("Re: %s incident in %s", g.pick(svc.words), region), fmt.Sprintf(
		"From: %s <%s@example.com>\nTo: %s-oncall@example.com\nSubject: Re: %s incident in %s\n\nHi all,\n\n"+
			"Quick update on %s: the %s problem is mitigated. We believe the root cause was %s. "+
			"For now we %s and we are watching %s closely.\n\nCould you review the follow-ups before Friday?\n\nThanks,\n%s",
		owner, strings.ToLower(strings.Fields(owner)[0]), svc.team, g.pick(svc.words), region, key, p.key, cause, fix, p.metric, owner)))

	// Wiki: postmortem or runbook.
	if g.r.IntN(2) == 0 {
		rel = append(rel, g.add("wiki", fmt.Sprintf("Postmortem: %s %s (%s)", svc.name, p.key, key), fmt.Sprintf(
			"# Postmortem: %s\n\n## Summary\nOn the day of release %s, %s for the %s in %s.\n\n## Root cause\n%s.\n\n"+
				"## Resolution\nThe %s team %s.\n\n## Action items\n- %s to add an alert on %s\n- %s to document the fix in the runbook\n",
			key, version, sym, g.pick(svc.words), region, strings.ToUpper(cause[:1])+cause[1:], svc.team, fix, owner, p.metric, reporter)))
	} else {
		rel = append(rel, g.add("wiki", fmt.Sprintf("Runbook: %s — %s", svc.name, g.pick(p.query)), fmt.Sprintf(
			"# Runbook: %s\n\n## Overview\nThe %s is written in %s and owned by the %s team.\n\n## Symptoms\nYou will see that %s. "+
				"The %s dashboard shows it first.\n\n## Diagnosis\nUsually this is %s.\n\n## Remedy\nWe %s. Escalate to %s if it recurs.\n",
			svc.name, g.pick(svc.words), svc.lang, svc.team, sym, p.metric, cause, fix, owner)))
	}

	// Log excerpt.
	var lines []string
	for i := 0; i < 8; i++ {
		level := g.pick(p.logLine)
		if i%3 == 0 {
			level = "INFO request served status=200"
		}
		lines = append(lines, fmt.Sprintf("2024-06-%02dT%02d:%02d:%02dZ %s service=%s region=%s version=%s", 1+n%28, 10+i/6, (i*7)%60, (i*13)%60, level, svc.name, region, version))
	}
	rel = append(rel, g.add("log", fmt.Sprintf("%s logs %s", svc.name, region), strings.Join(lines, "\n")))

	// Sometimes a weekly ops report mentions it too.
	if n%3 == 0 {
		rel = append(rel, g.add("report", fmt.Sprintf("Weekly reliability report, week %d", 20+n/3), fmt.Sprintf(
			"# Weekly reliability report\n\n## Executive summary\nOne notable incident: %s (%s), where %s. Root cause: %s.\n\n"+
				"## Findings\nError budget for %s was burned by %d%%. Other services stayed within budget.\n\n## Recommendations\nThe %s team %s.",
			g.pick(svc.words), key, sym, cause, svc.name, 20+n%50, svc.team, fix)))
	}

	// The query: half paraphrase (service words + problem query words),
	// half keyword-style (ticket key or a log message).
	var q string
	switch n % 4 {
	case 0:
		q = fmt.Sprintf("why did the %s have %s in %s", g.pick(svc.words), g.pick(p.query), region)
	case 1:
		q = fmt.Sprintf("%s %s root cause and fix", svc.name, g.pick(p.query))
	case 2:
		q = fmt.Sprintf("%s %s", key, g.pick(p.query))
	default:
		q = fmt.Sprintf("%s errors from %s after release %s", strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(g.pick(p.logLine), "ERROR "), "WARN "), "FATAL "), svc.name, version)
	}
	g.queries = append(g.queries, Query{ID: fmt.Sprintf("q%02d", len(g.queries)+1), Text: q, Relevant: rel})
}

func (g *gen) companyTopic(n int, c company) {
	rev := 5 + g.r.Float64()*60
	ni := rev * (0.05 + g.r.Float64()*0.2)
	eps := ni / (1 + g.r.Float64()*4)
	year := 2023 + n%2
	var rel []string
	rel = append(rel, g.add("report", fmt.Sprintf("%s FY%d annual results", c.name, year), fmt.Sprintf(
		"# %s (%s: %s) — FY%d annual results\n\nA year shaped by %s demand. The board declared a final dividend.\n\n"+
			"| Metric | FY%d | FY%d |\n|---|---:|---:|\n| Revenue (A$bn) | %.1f | %.1f |\n| Net income (A$bn) | %.2f | %.2f |\n| EPS (A$) | %.2f | %.2f |\n| Dividend yield | %.1f%% | %.1f%% |\n",
		c.name, c.exchange, c.ticker, year, c.sector, year, year-1, rev, rev*0.93, ni, ni*1.1, eps, eps*0.9, 2+g.r.Float64()*5, 2+g.r.Float64()*5)))
	a, b := g.pick(people), g.pick(people)
	rel = append(rel, g.add("wiki", fmt.Sprintf("Investment committee notes: %s", c.ticker), fmt.Sprintf(
		"# Investment committee — %s\nDate: 2024-0%d-1%d\nAttendees: %s, %s\n\n## Agenda\n- %s results review\n- exposure to %s\n\n"+
			"## Decisions\n- Hold the %s position\n\n## Action items\n- %s to model the dividend outlook by 2024-09-30\n",
		c.name, 1+n%8, n%9, a, b, c.name, c.sector, c.ticker, a)))
	rel = append(rel, g.add("email", fmt.Sprintf("%s earnings takeaways", c.ticker), fmt.Sprintf(
		"From: %s <analyst@example.com>\nTo: pm-team@example.com\nSubject: %s earnings takeaways\n\nHi,\n\n"+
			"%s reported revenue of A$%.1f billion and net profit of A$%.2f billion. Management sounded cautious about %s costs. "+
			"I'd keep our weighting unchanged.\n\nRegards,\n%s", b, c.ticker, c.name, rev, ni, c.sector, b)))
	var q string
	switch n % 3 {
	case 0:
		q = fmt.Sprintf("%s profit and revenue last year", c.name)
	case 1:
		q = fmt.Sprintf("what did we decide about %s shares", c.ticker)
	default:
		q = fmt.Sprintf("%s earnings per share and dividend", c.name)
	}
	g.queries = append(g.queries, Query{ID: fmt.Sprintf("q%02d", len(g.queries)+1), Text: q, Relevant: rel})
}

// noise adds documents relevant to no query that share everyday words.
func (g *gen) noise(n int) {
	subjects := []string{"office move", "holiday rota", "laptop refresh", "team offsite", "security training", "parking changes", "new coffee machine", "quarterly all-hands"}
	for i := 0; i < n; i++ {
		s := g.pick(subjects)
		svc := services[g.r.IntN(len(services))]
		g.add(g.pick([]string{"email", "wiki", "report"}), title(s), fmt.Sprintf(
			"Hi everyone,\n\nA reminder about the %s next week. The %s team will be out on Thursday afternoon, so the %s on-call "+
				"rota changes for two days. No release is planned for %s during that time.\n\nThanks,\n%s", s, svc.team, svc.name, svc.name, g.pick(people)))
	}
}

func write(dir string, g *gen) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	sort.Slice(g.docs, func(i, j int) bool { return g.docs[i].ID < g.docs[j].ID })
	for _, f := range []struct {
		name string
		rows func(enc *json.Encoder) error
	}{
		{"documents.jsonl", func(enc *json.Encoder) error {
			for _, d := range g.docs {
				if err := enc.Encode(d); err != nil {
					return err
				}
			}
			return nil
		}},
		{"queries.jsonl", func(enc *json.Encoder) error {
			for _, q := range g.queries {
				if err := enc.Encode(q); err != nil {
					return err
				}
			}
			return nil
		}},
	} {
		fh, err := os.Create(filepath.Join(dir, f.name))
		if err != nil {
			return err
		}
		enc := json.NewEncoder(fh)
		enc.SetEscapeHTML(false)
		if err := f.rows(enc); err != nil {
			fh.Close()
			return err
		}
		if err := fh.Close(); err != nil {
			return err
		}
	}
	return nil
}

// title upper-cases the first letter of every word.
func title(s string) string {
	ws := strings.Fields(s)
	for i, w := range ws {
		ws[i] = strings.ToUpper(w[:1]) + w[1:]
	}
	return strings.Join(ws, " ")
}
