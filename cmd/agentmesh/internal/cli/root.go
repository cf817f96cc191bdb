package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/agentmesh/agentmesh/cmd/agentmesh/internal/cli/gatewayconn"
	"github.com/agentmesh/agentmesh/gateway/openapi"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// DefaultURL is where `agentmesh up` serves the gateway.
const DefaultURL = "http://localhost:8080"

// Streams are the CLI's standard streams.
type Streams struct {
	In       io.Reader
	Out, Err io.Writer
}

// app is one invocation: the configuration, the flags, and the mesh
// connections once a command asks for them.
type app struct {
	cfg *Config
	io  Streams

	// Global flags.
	output, url, apiKey, context, tenant, project string
	grpc                                          bool

	mesh *mesh // opened by connect
}

// NewRoot builds the command tree over cfg and s. main adds the commands
// that run the mesh itself (up, env).
func NewRoot(cfg *Config, s Streams) *cobra.Command {
	a := &app{cfg: cfg, io: s}
	root := &cobra.Command{
		Use:   "agentmesh",
		Short: "agentmesh — run LLM agents in production",
		Long: `agentmesh — run LLM agents in production.

The commands that use a running mesh talk to its gateway over REST and SSE:
AGENTMESH_URL (default ` + DefaultURL + `), AGENTMESH_API_KEY, or a named
context of the contexts file (agentmesh context --help). --grpc calls the
services directly instead, at ORCHESTRATOR_ADDR, INDEXER_ADDR, ...

Exit codes: 0 done, 1 failed, 2 usage, 3 not found, 4 unavailable,
5 unauthenticated or not allowed, 6 refused by the mesh, 7 interrupted.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			switch a.output {
			case "table", "json", "yaml":
				return nil
			}
			return usagef("-o %q: want table, json or yaml", a.output)
		},
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	root.SetIn(s.In)
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usagef("%v", err) })
	pf := root.PersistentFlags()
	pf.StringVarP(&a.output, "output", "o", "table", "output format of reads: table, json or yaml")
	pf.StringVar(&a.url, "url", "", "gateway URL (overrides AGENTMESH_URL and the context)")
	pf.StringVar(&a.apiKey, "api-key", "", "gateway API key (overrides AGENTMESH_API_KEY and the context)")
	pf.StringVar(&a.context, "context", "", "context of the contexts file to use (overrides AGENTMESH_CONTEXT)")
	pf.StringVar(&a.tenant, "tenant", "", "tenant to act for, without an API key (overrides AGENTMESH_TENANT)")
	pf.StringVar(&a.project, "project", "", "project to act for (overrides AGENTMESH_PROJECT)")
	pf.BoolVar(&a.grpc, "grpc", false, "call the services over gRPC at their *_ADDR addresses instead of the gateway")
	root.AddCommand(a.chatCmd(), a.jobsCmd(), a.docsCmd(), a.classifyCmd(), a.sqlCmd(),
		a.modelsCmd(), a.usageCmd(), a.healthCmd(), a.versionCmd(), a.contextCmd(), a.indexerCmd(), a.mcpCmd())
	return root
}

// Execute runs root with args and returns the exit code, having printed
// any error to stderr.
func Execute(ctx context.Context, root *cobra.Command, args []string) int {
	root.SetArgs(legacyFlags(args))
	cmd, err := root.ExecuteContextC(ctx)
	if err != nil && isCobraUsage(err) {
		err = usagef("%v", err)
	}
	code := ExitCode(err)
	if err != nil {
		w := root.ErrOrStderr()
		fmt.Fprintf(w, "agentmesh: %s\n", errorText(err))
		if code == ExitDenied && strings.Contains(err.Error(), "missing API key") {
			// The gateway's words are for HTTP clients.
			fmt.Fprintln(w, "Give the CLI a key: --api-key, AGENTMESH_API_KEY, or a context's (agentmesh context set NAME --api-key KEY).")
		}
		if code == ExitUsage && cmd != nil {
			fmt.Fprintf(w, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
	}
	return code
}

// legacyFlags spells the single-dash flags of the CLI before cobra
// (classify -yes, indexer rebuild -all) as cobra reads them, so scripts
// written for it keep working.
func legacyFlags(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		switch a {
		case "-yes", "-all":
			a = "-" + a
		}
		out[i] = a
	}
	return out
}

// isCobraUsage recognises cobra's own argument errors, which it does not
// type.
func isCobraUsage(err error) bool {
	if errors.Is(err, ErrUsage) {
		return false
	}
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "accepts ", "requires at least", "invalid argument", "flag needs an argument"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// noArgs refuses arguments, naming them: for commands that only group
// others, an argument is an unknown subcommand.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
	}
	return nil
}

// exactArgs wants n arguments, named in the message.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s takes %s, got %d argument(s)", cmd.CommandPath(), names, len(args))
		}
		return nil
	}
}

// group makes a command that only holds subcommands: alone it prints its
// help, with an unknown word it is a usage error.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, Args: noArgs, RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() }}
	c.AddCommand(subs...)
	return c
}

// settings is the resolved way to the mesh.
type settings struct {
	url, urlHint    string // urlHint says how to change the URL
	apiKey          string
	tenant, project string
	// tenantNamed is set when this invocation named the tenant (--tenant,
	// AGENTMESH_TENANT): with an API key it is then sent, as an operator
	// key's requests must name theirs.
	tenantNamed bool
	grpc        bool
}

// resolve applies flags, then the environment, then the context, then the
// defaults.
func (a *app) resolve() (settings, error) {
	file, err := loadContexts(a.contextsPath())
	if err != nil {
		return settings{}, err
	}
	name := first(a.context, a.cfg.Context, file.CurrentContext)
	var c namedContext
	if name != "" {
		found, ok := file.find(name)
		if !ok {
			return settings{}, status.Errorf(codes.NotFound, "context %q is not in %s (agentmesh context list)", name, a.contextsPath())
		}
		c = *found
	}
	s := settings{
		url:         first(a.url, a.cfg.URL, c.URL, DefaultURL),
		apiKey:      first(a.apiKey, a.cfg.APIKey, c.APIKey),
		tenant:      first(a.tenant, a.cfg.Tenant, c.Tenant, "default"),
		project:     first(a.project, a.cfg.Project, c.Project),
		tenantNamed: first(a.tenant, a.cfg.Tenant) != "",
	}
	switch {
	case a.url != "":
		s.urlHint = "(given by --url)"
	case a.cfg.URL != "":
		s.urlHint = "(from AGENTMESH_URL)"
	case c.URL != "":
		s.urlHint = fmt.Sprintf("(from context %q; set AGENTMESH_URL or agentmesh context set %s --url URL)", name, name)
	default:
		s.urlHint = "(set AGENTMESH_URL)"
	}
	transport := first(a.cfg.Transport, c.Transport, "gateway")
	s.grpc = a.grpc || transport == "grpc"
	return s, nil
}

func first(vals ...string) string {
	for _, v := range vals {
		if v = strings.TrimSpace(v); v != "" {
			return v
		}
	}
	return ""
}

func (a *app) contextsPath() string {
	if a.cfg.ConfigFile != "" {
		return a.cfg.ConfigFile
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		dir = "."
	}
	return filepath.Join(dir, "agentmesh", "config.yaml")
}

// mesh holds one connection per service: the gateway's for all of them,
// or one gRPC connection each.
type mesh struct {
	s                                         settings
	gateway                                   *gatewayconn.Conn // nil over gRPC
	orchestrator, indexer, classifier, sqlgen grpc.ClientConnInterface
	model                                     grpc.ClientConnInterface
	close                                     []func() error
}

// connect opens the connections once per invocation.
func (a *app) connect() (*mesh, error) {
	if a.mesh != nil {
		return a.mesh, nil
	}
	s, err := a.resolve()
	if err != nil {
		return nil, err
	}
	m := &mesh{s: s}
	if !s.grpc {
		gw, err := gatewayconn.New(gatewayconn.Options{URL: s.url, APIKey: s.apiKey, Tenant: s.tenant, Project: s.project,
			SendTenant: s.tenantNamed, Hint: s.urlHint, Spec: openapi.Spec})
		if err != nil {
			return nil, usagef("%v %s", err, s.urlHint)
		}
		m.gateway = gw
		c := textChecked{gw}
		m.orchestrator, m.indexer, m.classifier, m.sqlgen, m.model = c, c, c, c, c
		a.mesh = m
		return m, nil
	}
	for _, d := range []struct {
		conn          *grpc.ClientConnInterface
		name, addr, v string
	}{
		{&m.orchestrator, "orchestrator", a.cfg.OrchestratorAddr, "ORCHESTRATOR_ADDR"},
		{&m.indexer, "indexer", a.cfg.IndexerAddr, "INDEXER_ADDR"},
		{&m.classifier, "classifier", a.cfg.ClassifierAddr, "CLASSIFIER_ADDR"},
		{&m.sqlgen, "SQL agent", a.cfg.SQLAgentAddr, "SQLAGENT_ADDR"},
		{&m.model, "model gateway", a.cfg.ModelGatewayAddr, "MODELGATEWAY_ADDR"},
	} {
		cc, err := grpcx.Dial(d.addr, grpc.WithChainUnaryInterceptor(unreachableUnary(d.name, d.addr, d.v)),
			grpc.WithChainStreamInterceptor(unreachableStream(d.name, d.addr, d.v)))
		if err != nil {
			return nil, usagef("%s: %v", d.v, err)
		}
		*d.conn = textChecked{cc}
		m.close = append(m.close, cc.Close)
	}
	a.mesh = m
	return m, nil
}

// textChecked refuses, as a usage error naming the field, a request
// holding text that is not UTF-8 (an argument or a file in Latin-1): it
// cannot be encoded, and over gRPC the service answered "internal error"
// (over the gateway a refusal naming the proto field).
type textChecked struct{ grpc.ClientConnInterface }

func (c textChecked) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if err := checkText(args); err != nil {
		return err
	}
	return c.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
}

func (c textChecked) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := c.ClientConnInterface.NewStream(ctx, desc, method, opts...)
	if err != nil {
		return nil, err
	}
	return textCheckedStream{s}, nil
}

type textCheckedStream struct{ grpc.ClientStream }

func (s textCheckedStream) SendMsg(m any) error {
	if err := checkText(m); err != nil {
		return err
	}
	return s.ClientStream.SendMsg(m)
}

// invalidUTF8 finds the field protobuf's encoder names ("proto: field
// agentmesh.orchestrator.v1.StreamMessageRequest.content contains invalid
// UTF-8").
var invalidUTF8 = regexp.MustCompile(`field ([\w.]+) contains invalid UTF-8`)

func checkText(m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil
	}
	if _, err := proto.Marshal(pm); err == nil {
		return nil
	}
	// The binary encoder does not name the field; the JSON one does.
	_, err := protojson.Marshal(pm)
	if err == nil {
		return nil
	}
	if f := invalidUTF8.FindStringSubmatch(err.Error()); f != nil {
		field := f[1][strings.LastIndexByte(f[1], '.')+1:]
		return usagef("%s: the text is not valid UTF-8; convert it first (e.g. iconv -f latin1 -t utf-8)", field)
	}
	return nil
}

// closeMesh closes what connect opened.
func (a *app) closeMesh() {
	if a.mesh == nil {
		return
	}
	for _, c := range a.mesh.close {
		_ = c()
	}
	a.mesh = nil
}

// unreachable rewrites a connection failure to name the service's address
// and the variable that sets it: the user's own configuration, so the
// status carries grpcx.ReasonUnreachable and the connection passes it on
// as it is (grpcx masks addresses only in what it cannot place).
func unreachable(name, addr, env string, err error) error {
	if grpcx.ConnectionLost(err) {
		return grpcx.Errorf(codes.Unavailable, grpcx.ReasonUnreachable, "cannot reach the %s at %s (set %s): %s", name, addr, env, status.Convert(err).Message())
	}
	return err
}

func unreachableUnary(name, addr, env string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return unreachable(name, addr, env, invoker(ctx, method, req, reply, cc, opts...))
	}
}

func unreachableStream(name, addr, env string) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, unreachable(name, addr, env, err)
		}
		return &namedStream{ClientStream: s, name: name, addr: addr, env: env}, nil
	}
}

// namedStream names the address in a stream's connection failure, which
// grpc-go reports at the first RecvMsg.
type namedStream struct {
	grpc.ClientStream
	name, addr, env string
}

func (s *namedStream) RecvMsg(m any) error {
	return unreachable(s.name, s.addr, s.env, s.ClientStream.RecvMsg(m))
}

// input is stdin for a command that prompts: it ends with ctx's error
// when ctx ends (Ctrl-C), where a read of the terminal would otherwise wait
// for a line. The copy reads ahead of the consumer, which is the only one.
func (a *app) input(ctx context.Context) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		_, err := io.Copy(pw, a.io.In)
		pw.CloseWithError(err)
	}()
	go func() {
		<-ctx.Done()
		pw.CloseWithError(ctx.Err())
	}()
	return pr
}

// run wraps a command body that needs the mesh.
func (a *app) run(body func(ctx context.Context, cmd *cobra.Command, args []string, m *mesh) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		m, err := a.connect()
		if err != nil {
			return err
		}
		defer a.closeMesh()
		ctx := cmd.Context()
		if m.gateway == nil {
			// Direct calls carry the scope as metadata too, as the gateway
			// would send it.
			ctx = metadata.AppendToOutgoingContext(ctx, grpcx.TenantMetadataKey, m.s.tenant, grpcx.ProjectMetadataKey, m.s.project)
		}
		return body(ctx, cmd, args, m)
	}
}

// scope is the tenant and project requests name. Through the gateway the
// API key decides instead (gatewayconn leaves the tenant out).
func (m *mesh) scope() *commonv1.Scope {
	return &commonv1.Scope{TenantId: m.s.tenant, ProjectId: m.s.project}
}
