//go:build e2ecluster

package cluster

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	_ "modernc.org/sqlite" // the shop database the SQL agent reads

	"github.com/agentmesh/agentmesh/libs/events"
	"github.com/agentmesh/agentmesh/libs/testkit"
)

// replicaCounts is the topology: two replicas of every service whose
// design allows it, the indexer included since every replica's search
// follows every replica's chunk changes. The SQL agent and vision run one
// each, as the issue asks only the others to be replicated, which makes
// their kill a kill of the whole service.
var replicaCounts = map[string]int{
	"modelgateway": 2, "orchestrator": 2, "classifier": 2, "gateway": 2, "indexer": 2,
	"sqlagent": 1, "vision": 1,
}

// usesMongo lists the services with a MongoDB dependency in their health.
var usesMongo = map[string]bool{"orchestrator": true, "classifier": true, "indexer": true, "sqlagent": true}

// replica is one process of a service.
type replica struct {
	*proc
	svc  string
	ip   string
	addr string // gRPC address; HTTP for the gateway
	conn *grpc.ClientConn
}

// cluster is the mesh under test and everything around it.
type cluster struct {
	t      *testing.T
	dir    string
	logDir string
	bins   binaries

	nats     []*proc
	natsURLs []string
	mongo    *proc
	mongoURI string
	dns      *testkit.DNS
	front    *front
	sim      *simServer
	market   *marketData
	rec      *recorder
	shopDB   string

	replicas map[string][]*replica
	ports    map[string]int
	faults   *syncList[*fault]
	// startupCrashes are the exits of replicas before they first served.
	startupCrashes []startupCrash
	// sseKill is the kill of the gateway replica under the watch stream of
	// analysis sseRoot.
	sseKill *fault
	sseRoot string
	// chatKill is the kill of the gateway replica under the SSE stream of
	// a chat turn in conversation chatConv.
	chatKill *fault
	chatConv string
}

// startCluster builds and starts everything, and returns once the front
// answers /healthz with 200.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{t: t, replicas: map[string][]*replica{}, ports: map[string]int{}, faults: &syncList[*fault]{}}
	c.dir = t.TempDir()
	c.logDir = os.Getenv("E2ECLUSTER_LOG_DIR")
	if c.logDir == "" {
		c.logDir = filepath.Join(os.TempDir(), fmt.Sprintf("agentmesh-e2e-cluster-logs-%d", time.Now().Unix()))
		// Kept when the suite fails, for reading.
		t.Cleanup(func() {
			if !t.Failed() {
				_ = os.RemoveAll(c.logDir)
			}
		})
	}
	if err := os.MkdirAll(c.logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("process logs in %s", c.logDir)
	c.bins = buildBinaries(t)
	t.Cleanup(c.stopAll)

	start := time.Now()
	c.startNATS()
	c.startMongo()
	c.rec = &recorder{owner: c.ownerOf}
	var err error
	if c.sim, err = startSim(c.rec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.sim.close)
	if c.market, err = startMarketData(c.rec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.market.close)
	if c.dns, err = testkit.StartDNS(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.dns.Close)
	c.shopDB = createShop(t, c.dir)
	t.Logf("infrastructure up in %v: NATS %s, FerretDB %s", time.Since(start).Round(time.Millisecond), strings.Join(c.natsURLs, ","), c.mongoURI)

	// Addresses first: every replica of a service listens on the same port
	// of its own loopback address, and the DNS name of the service lists
	// those addresses.
	ips := map[string][]string{}
	for _, svc := range services {
		addrs := make([]netip.Addr, replicaCounts[svc])
		for i := range addrs {
			ips[svc] = append(ips[svc], fmt.Sprintf("127.0.0.%d", i+1))
			addrs[i] = netip.MustParseAddr(ips[svc][i])
		}
		port, err := freePort(ips[svc]...)
		if err != nil {
			t.Fatal(err)
		}
		c.ports[svc] = port
		c.dns.Set(svc+".mesh.test", addrs...)
	}
	for _, svc := range services {
		for i, ip := range ips[svc] {
			name := fmt.Sprintf("%s-%c", svc, 'a'+i)
			r := &replica{svc: svc, ip: ip, addr: net.JoinHostPort(ip, fmt.Sprint(c.ports[svc]))}
			r.proc = newProc(c.logDir, name, c.bins.service[svc], c.env(svc, r))
			c.replicas[svc] = append(c.replicas[svc], r)
		}
	}
	start = time.Now()
	for _, svc := range services {
		if svc == "gateway" {
			continue
		}
		for _, r := range c.replicas[svc] {
			if err := r.start(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, svc := range services {
		if svc == "gateway" {
			continue
		}
		for _, r := range c.replicas[svc] {
			c.waitStarted(r, 90*time.Second)
		}
	}
	var backends []frontBackend
	for _, r := range c.replicas["gateway"] {
		if err := r.start(); err != nil {
			t.Fatal(err)
		}
		backends = append(backends, frontBackend{r.name, r.addr})
	}
	if c.front, err = startFront(backends); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.front.close)
	for _, r := range c.replicas["gateway"] {
		c.waitStarted(r, 60*time.Second)
	}
	t.Logf("%d service processes serving in %v", c.processCount(), time.Since(start).Round(time.Millisecond))
	return c
}

func (c *cluster) processCount() int {
	n := 0
	for _, rs := range c.replicas {
		n += len(rs)
	}
	return n
}

// target is the gRPC target of svc: its DNS name on the suite's resolver.
func (c *cluster) target(svc string) string {
	return fmt.Sprintf("dns://%s/%s.mesh.test:%d", c.dns.Addr(), svc, c.ports[svc])
}

// env is a replica's whole environment: the configuration table's
// variables, nothing inherited from the test.
func (c *cluster) env(svc string, r *replica) []string {
	dataDir := filepath.Join(c.dir, "data", fmt.Sprintf("%s-%s", svc, r.ip))
	env := map[string]string{
		"PATH": "/usr/bin:/bin", "HOME": dataDir, "TMPDIR": dataDir,
		"LOG_FORMAT": "json", "LOG_LEVEL": "info",
		"GRPC_ADDR":        r.addr,
		"METRICS_ADDR":     r.ip + ":0",
		"SHUTDOWN_TIMEOUT": "5s",
		// Never MONGO_SINGLE_WRITER: these are replicas.
		"MONGO_URI":            c.mongoURI,
		"MONGO_DATABASE":       "agentmesh",
		"NATS_URL":             strings.Join(c.natsURLs, ","),
		"NATS_STREAM_REPLICAS": "3",
		"MODELGATEWAY_ADDR":    c.target("modelgateway"),
		"ORCHESTRATOR_ADDR":    c.target("orchestrator"),
		"VISION_ADDR":          c.target("vision"),
		"INDEXER_ADDR":         c.target("indexer"),
		"CLASSIFIER_ADDR":      c.target("classifier"),
		"SQLAGENT_ADDR":        c.target("sqlagent"),
	}
	switch svc {
	case "modelgateway":
		routing := filepath.Join(c.dir, "routing.yaml")
		if err := os.WriteFile(routing, []byte(routingFile(c.sim.url)), 0o644); err != nil {
			c.t.Fatal(err)
		}
		env["MODELGATEWAY_CONFIG"] = routing
		env["OPENAI_API_KEY"] = "e2e-cluster-key"
		env["MODELGATEWAY_PROBE_INTERVAL"] = "5s"
	case "orchestrator":
		env["MARKET_DATA_URL"] = c.market.url
		// Recovery timings shortened so that the suite runs in minutes; the
		// code paths are the production ones.
		env["ANALYSIS_WORK_ACK_WAIT"] = "6s"
		env["ANALYSIS_LEASE_GRACE"] = "2s"
		env["ANALYSIS_SWEEP_INTERVAL"] = "3s"
		env["ANALYSIS_STALE_AFTER"] = "15s"
		env["ANALYSIS_TOOL_TIMEOUT"] = "20s"
		env["ORCHESTRATOR_TURN_LEASE_TTL"] = "5s"
	case "indexer":
		env["INDEXER_DATA_DIR"] = filepath.Join(dataDir, "indexes")
		// The extraction queue's ack wait follows it (at least 30 s): the
		// wait before a crashed indexer's job runs again.
		env["INDEXER_EXTRACTOR_TIMEOUT"] = "20s"
	case "sqlagent":
		env["SQLAGENT_CONNECTIONS"] = "shop=sqlite:" + c.shopDB
		// An execution whose process died is taken for interrupted this
		// long plus 30 s after it started.
		env["SQLAGENT_QUERY_TIMEOUT"] = "10s"
	case "gateway":
		env["HTTP_ADDR"] = r.addr
		env["GATEWAY_SSE_KEEPALIVE"] = "2s"
		env["GATEWAY_PEERS"] = c.target("gateway")
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// routingFile routes every logical model to the simulator, an
// OpenAI-compatible provider; the provider model names the logical one.
func routingFile(simURL string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "providers:\n  sim: {type: openai, base_url: %q}\nmodels:\n", simURL+"/v1")
	for _, m := range []string{"chat", "planner", "synthesis", "sql", "classifier", "extraction", "vision", "embed"} {
		fmt.Fprintf(&b, "  %s:\n    - {provider: sim, model: sim-%s}\n", m, m)
	}
	return b.String()
}

// startNATS starts a three-node JetStream cluster, each node with its own
// store directory, and waits until JetStream has a meta leader.
func (c *cluster) startNATS() {
	t := c.t
	const nodes = 3
	clientPorts := make([]int, nodes)
	routePorts := make([]int, nodes)
	for i := range nodes {
		var err error
		if clientPorts[i], err = freePort("127.0.0.1"); err != nil {
			t.Fatal(err)
		}
		if routePorts[i], err = freePort("127.0.0.1"); err != nil {
			t.Fatal(err)
		}
	}
	var routes []string
	for _, p := range routePorts {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	for i := range nodes {
		name := fmt.Sprintf("nats-%d", i+1)
		conf := filepath.Join(c.dir, name+".conf")
		store := filepath.Join(c.dir, name)
		text := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
jetstream {
  store_dir: %q
  max_memory_store: 128MB
  max_file_store: 2GB
}
cluster {
  name: e2e
  listen: 127.0.0.1:%d
  routes: [%s]
}
`, name, clientPorts[i], store, routePorts[i], strings.Join(routes, ", "))
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		p := newProc(c.logDir, name, c.bins.natsServer, []string{"PATH=/usr/bin:/bin"}, "-c", conf)
		if err := p.start(); err != nil {
			t.Fatal(err)
		}
		c.nats = append(c.nats, p)
		c.natsURLs = append(c.natsURLs, fmt.Sprintf("nats://127.0.0.1:%d", clientPorts[i]))
	}
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		if last = c.jetStreamReady(); last == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("NATS cluster: JetStream not ready within 60s: %v\n%s", last, c.nats[0].tail(2000))
}

// jetStream connects the test to the NATS cluster; close closes the
// connection.
func (c *cluster) jetStream() (js jetstream.JetStream, close func(), err error) {
	nc, err := nats.Connect(strings.Join(c.natsURLs, ","), nats.Timeout(2*time.Second))
	if err != nil {
		return nil, nil, err
	}
	js, err = jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return js, nc.Close, nil
}

// jetStreamReady reports whether the cluster's JetStream answers.
func (c *cluster) jetStreamReady() error {
	js, closeNATS, err := c.jetStream()
	if err != nil {
		return err
	}
	defer closeNATS()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err
}

// startMongo starts the ferretdb binary on SQLite files of its own.
func (c *cluster) startMongo() {
	port, err := freePort("127.0.0.1")
	if err != nil {
		c.t.Fatal(err)
	}
	data := filepath.Join(c.dir, "ferretdb")
	state := filepath.Join(c.dir, "ferretdb-state")
	for _, d := range []string{data, state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			c.t.Fatal(err)
		}
	}
	c.mongo = newProc(c.logDir, "ferretdb", c.bins.ferretdb, []string{"PATH=/usr/bin:/bin", "HOME=" + state},
		"--handler=sqlite", "--sqlite-url=file:"+data+"/",
		fmt.Sprintf("--listen-addr=127.0.0.1:%d", port),
		"--state-dir="+state, "--telemetry=disable", "--debug-addr=-", "--log-level=warn")
	// The services reach FerretDB through a relay that gives write
	// commands their turns: many replicas' versioned updates rely on
	// MongoDB's single-document isolation, which FerretDB lacks (see
	// testkit.SerialWrites); the production form runs MongoDB.
	relay, err := testkit.StartSerialWrites(fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = relay.Close() })
	c.mongoURI = "mongodb://" + relay.Addr() + "/"
	if err := c.mongo.start(); err != nil {
		c.t.Fatal(err)
	}
	c.waitMongo(30 * time.Second)
}

// mongoUp reports whether the database answers a ping.
func (c *cluster) mongoUp() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(c.mongoURI).SetServerSelectionTimeout(time.Second))
	if err != nil {
		return false
	}
	defer client.Disconnect(ctx)
	return client.Ping(ctx, nil) == nil
}

func (c *cluster) waitMongo(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for !c.mongoUp() {
		if time.Now().After(deadline) {
			c.t.Fatalf("FerretDB not answering within %v:\n%s", timeout, c.mongo.tail(2000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// db connects the test to the mesh's database, for its checks.
func (c *cluster) db(ctx context.Context) (*mongo.Database, func()) {
	client, err := mongo.Connect(options.Client().ApplyURI(c.mongoURI))
	if err != nil {
		c.t.Fatal(err)
	}
	return client.Database("agentmesh"), func() { _ = client.Disconnect(ctx) }
}

// health is a replica's own grpc.health.v1 status for service ("" is the
// overall status, "liveness" the one dependencies do not turn off); for a
// gateway, its /healthz answer. "DOWN" when it cannot be asked.
func (c *cluster) health(r *replica, service string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if r.svc == "gateway" {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.addr+"/healthz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "DOWN"
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return "SERVING"
		}
		return "NOT_SERVING"
	}
	if r.conn == nil {
		cc, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return "DOWN"
		}
		r.conn = cc
	}
	resp, err := healthpb.NewHealthClient(r.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return "DOWN"
	}
	return resp.GetStatus().String()
}

// waitServing waits until r reports SERVING, failing the test (with the
// end of its log) if it does not within timeout or exits.
func (c *cluster) waitServing(r *replica, timeout time.Duration) time.Duration {
	c.t.Helper()
	start := time.Now()
	for c.health(r, "") != "SERVING" {
		if r.exited() {
			c.t.Fatalf("%s exited:\n%s", r.name, r.tail(3000))
		}
		if time.Since(start) > timeout {
			c.t.Fatalf("%s not SERVING within %v (now %s):\n%s", r.name, timeout, c.health(r, ""), r.tail(3000))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// startupCrash is a replica that exited before it first served.
type startupCrash struct{ replica, cause string }

// waitStarted waits until r first serves. A replica that exits before is
// started again after a second, up to five times, as Kubernetes restarts
// a crashed container; each such exit is recorded with the error it
// logged, and printed in the summary.
func (c *cluster) waitStarted(r *replica, timeout time.Duration) {
	c.t.Helper()
	start := time.Now()
	for c.health(r, "") != "SERVING" {
		if r.exited() {
			c.startupCrashes = append(c.startupCrashes, startupCrash{r.name, lastError(r.tail(4000))})
			if r.starts >= 6 {
				c.t.Fatalf("%s exited %d times while starting:\n%s", r.name, r.starts, r.tail(3000))
			}
			time.Sleep(time.Second)
			if err := r.start(); err != nil {
				c.t.Fatal(err)
			}
		}
		if time.Since(start) > timeout {
			c.t.Fatalf("%s not SERVING within %v (now %s):\n%s", r.name, timeout, c.health(r, ""), r.tail(3000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lastError is the error of the last line of a JSON log that has one.
func lastError(log string) string {
	lines := strings.Split(strings.TrimSpace(log), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		var l struct {
			Msg   string `json:"msg"`
			Error string `json:"error"`
		}
		if json.Unmarshal([]byte(lines[i]), &l) == nil && l.Error != "" {
			return l.Msg + ": " + l.Error
		}
	}
	return "(no error logged)"
}

// ownerOf names the service process holding the client end of a
// connection to one of the test's servers.
func (c *cluster) ownerOf(client, server string) string {
	var pids []int
	names := map[int]string{}
	for _, rs := range c.replicas {
		for _, r := range rs {
			if pid := r.pid(); pid != 0 {
				pids = append(pids, pid)
				names[pid] = r.name
			}
		}
	}
	return names[peerPID(client, server, pids)]
}

// replica returns the replica named name (e.g. "orchestrator-b").
func (c *cluster) replica(name string) *replica {
	for _, rs := range c.replicas {
		for _, r := range rs {
			if r.name == name {
				return r
			}
		}
	}
	return nil
}

// stopAll stops every process, services first.
func (c *cluster) stopAll() {
	for _, rs := range c.replicas {
		for _, r := range rs {
			if r.conn != nil {
				r.conn.Close()
			}
			r.stop(5 * time.Second)
		}
	}
	if c.mongo != nil {
		c.mongo.stop(5 * time.Second)
	}
	for _, n := range c.nats {
		n.stop(5 * time.Second)
	}
}

// createShop writes the SQL agent's database: a small shop.
func createShop(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "shop.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	stmts := []string{
		`CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT NOT NULL)`,
		`CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id), total REAL NOT NULL, placed_at TEXT NOT NULL)`,
	}
	for i := 1; i <= 20; i++ {
		stmts = append(stmts, fmt.Sprintf(`INSERT INTO customers VALUES (%d, 'customer %d', '%s')`, i, i, []string{"AU", "NZ", "UK", "US"}[i%4]))
	}
	for i := 1; i <= 100; i++ {
		stmts = append(stmts, fmt.Sprintf(`INSERT INTO orders VALUES (%d, %d, %d.5, '2025-0%d-1%d')`, i, i%20+1, 10+i*3, i%9+1, i%10))
	}
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("shop database: %s: %v", s, err)
		}
	}
	return path
}

// tableRows counts the rows of table in the shop database.
func (c *cluster) tableRows(table string) (int, error) {
	// Wait out a write job's lock rather than fail on it.
	db, err := sql.Open("sqlite", "file:"+c.shopDB+"?_pragma=busy_timeout(20000)")
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n int
	err = db.QueryRow(`SELECT count(*) FROM "` + strings.ReplaceAll(table, `"`, `""`) + `"`).Scan(&n)
	return n, err
}

// eventsStreams are the streams whose replicas the suite checks.
var eventsStreams = []string{events.StreamEvents, events.StreamWork, events.StreamDeadLetter}
