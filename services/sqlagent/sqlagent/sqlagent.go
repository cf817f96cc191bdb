// Package sqlagent is the SQL agent: plain-English database jobs with confirmation before SQL runs.
//
// Run starts it; the service binary and `agentmesh up` both call Run.
package sqlagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	sqlagentv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/sqlagent/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/grpcapi"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/knowledge"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/mailer"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/session"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/session/mongostore"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/sqlgen"
)

// Name is the service name used in logs, metrics and health.
const Name = "sqlagent"

// Config is the service's configuration, read from the environment.
type Config struct {
	service.Common `env:""`
	// Mongo is the document store.
	Mongo mongox.Config `env:""`
	// ModelGatewayAddr is the model gateway gRPC address.
	ModelGatewayAddr string `env:"MODELGATEWAY_ADDR" default:"localhost:9091" help:"model gateway gRPC address"`
	// Connections lists the databases users may query.
	Connections string `env:"SQLAGENT_CONNECTIONS" secret:"true" help:"databases, separated by ';' or newlines, each name=driver:dsn with driver sqlite (file path or file: URI), postgres (URL or key=value DSN) or mysql for MariaDB and MySQL (user:password@tcp(host:port)/database); a postgres or mysql connection may add name[read]=driver:dsn for a least-privilege role or user that runs every read (results are written through name=; with only name[read]= the connection takes no writes). A PostgreSQL read role needs TEMPORARY on the database and a primary (not a standby) for the server-side check; a warning is logged at start when it is a superuser or a member of pg_write_server_files, pg_read_server_files, pg_signal_backend, pg_execute_server_program or pg_read_all_stats (other sessions' SQL; pg_monitor includes it). A MySQL read user needs SELECT, SHOW VIEW for views, and EXECUTE and SELECT on mysql.proc for stored functions (their bodies are checked); a warning is logged at start when it holds FILE, SUPER, PROCESS (other sessions' SQL) or a privilege that writes"`
	// ConnectionTenants scopes connections to tenants.
	ConnectionTenants string `env:"SQLAGENT_CONNECTION_TENANTS" help:"which tenants may use which connection: entries separated by ';' or newlines, each name=tenant,tenant (tenant ids matched exactly) or name=* for all tenants. Empty: every connection serves every tenant (single-tenant installs). Set: every connection of SQLAGENT_CONNECTIONS must be listed, or the start fails naming it, so none is shared by omission (the sample connection is shared unless listed); another tenant's connection is not listed, offered or usable, and naming it is NotFound exactly as an unknown name"`
	// SampleDB is where to keep the sample database; empty: none.
	SampleDB string `env:"SQLAGENT_SAMPLE_DB" help:"create a small sample SQLite database (a shop: customers, products, orders, order_items) at this path if missing and offer it as connection 'sample' (agentmesh up sets it); empty: none"`
	// PromptLogging keeps the model prompts and answers of each session.
	PromptLogging bool `env:"SQLAGENT_PROMPT_LOGGING" default:"false" help:"keep every prompt and answer of the SQL and job agents per session in MongoDB (sql_prompts), passwords, keys and tokens masked, readable through ListSqlPrompts; off by default"`
	// SQLModel is the logical model that writes SQL.
	SQLModel string `env:"SQLAGENT_SQL_MODEL" default:"sql" help:"logical model (model gateway) that writes SQL"`
	// RowLimit caps the rows a query returns.
	RowLimit int `env:"SQLAGENT_ROW_LIMIT" default:"200" help:"most rows a query returns; more are cut and the result marked truncated"`
	// QueryTimeout bounds one query or table write.
	QueryTimeout time.Duration `env:"SQLAGENT_QUERY_TIMEOUT" default:"30s" help:"longest a query or a table write may run"`
	// SMTPAddr is the mail server SEND_EMAIL sends through; empty: off.
	SMTPAddr string `env:"SQLAGENT_SMTP_ADDR" help:"SMTP server (host:port) SEND_EMAIL sends results through; empty: e-mail is off and SEND_EMAIL is refused"`
	// SMTPFrom is the sender address.
	SMTPFrom string `env:"SQLAGENT_SMTP_FROM" help:"sender address of SEND_EMAIL messages, e.g. SQL agent <sql-agent@example.com>; required with SQLAGENT_SMTP_ADDR"`
	// SMTPTLS is starttls or none.
	SMTPTLS string `env:"SQLAGENT_SMTP_TLS" default:"starttls" help:"starttls (the server must offer STARTTLS; its certificate is verified) or none (a relay on a trusted network; no password is then sent)"`
	// SMTPUsername and SMTPPassword authenticate (AUTH PLAIN).
	SMTPUsername string `env:"SQLAGENT_SMTP_USERNAME" help:"SMTP user for AUTH PLAIN; empty: no authentication"`
	SMTPPassword string `env:"SQLAGENT_SMTP_PASSWORD" secret:"true" help:"SMTP password (from a secret)"`
	// ConfirmationWords overrides session.DefaultConfirmationWords.
	ConfirmationWords string `env:"SQLAGENT_CONFIRMATION_WORDS" help:"comma-separated words that confirm a pending SQL, write or e-mail and are never taken as a parameter (a question, a table name, a subject) when nothing was asked; empty: yes, ok, okay, sure, correct and the like"`
	// SchemaChars caps the schema text in a prompt.
	SchemaChars int `env:"SQLAGENT_SCHEMA_CHARS" default:"24000" help:"longest schema text (one line per table) the model is shown to write SQL; a longer schema shows only the tables the question names (by table, column or comment words, and, with INDEXER_ADDR set, by the session's knowledge base passages naming a table) and their foreign-key neighbours, and the reply says which"`
	// IndexerAddr is the indexer, whose knowledge base helps pick tables;
	// empty: no search.
	IndexerAddr string `env:"INDEXER_ADDR" help:"indexer gRPC address; when set, a schema too long for the prompt (SQLAGENT_SCHEMA_CHARS) is narrowed with a search of the session's knowledge base too: a passage naming a table makes it relevant. A search that fails or takes over 3s is logged and skipped. Empty: no search"`
	// EmailRowLimit caps the rows one e-mail carries.
	EmailRowLimit int `env:"SQLAGENT_EMAIL_ROW_LIMIT" default:"10000" help:"most rows one SEND_EMAIL attachment carries; more are cut and the message says so"`
}

// Run serves the service on rt.Listener until ctx is done, then shuts down
// gracefully.
func Run(ctx context.Context, cfg *Config, rt service.Runtime) error {
	specs, err := connections.Parse(cfg.Connections)
	if err != nil {
		closeListener(rt)
		return fmt.Errorf("SQLAGENT_CONNECTIONS: %w", err)
	}
	var ours []string // connections this service made, not the operator
	if cfg.SampleDB != "" && !hasConnection(specs, connections.SampleName) {
		ours = append(ours, connections.SampleName)
		sample, err := connections.CreateSample(cfg.SampleDB)
		if err != nil {
			closeListener(rt)
			return fmt.Errorf("SQLAGENT_SAMPLE_DB: %w", err)
		}
		specs = append(specs, sample)
	}
	// The sample made here holds demo data only: shared unless the list
	// scopes it. An operator's own connection named "sample" is not.
	if specs, err = connections.ScopeTenants(specs, cfg.ConnectionTenants, ours...); err != nil {
		closeListener(rt)
		return fmt.Errorf("SQLAGENT_CONNECTION_TENANTS: %w", err)
	}
	if cfg.RowLimit <= 0 {
		closeListener(rt)
		return fmt.Errorf("SQLAGENT_ROW_LIMIT must be positive, got %d", cfg.RowLimit)
	}
	var mail session.Mailer
	if cfg.SMTPAddr != "" {
		m, err := mailer.New(mailer.Config{Addr: cfg.SMTPAddr, From: cfg.SMTPFrom, TLS: cfg.SMTPTLS, Username: cfg.SMTPUsername, Password: cfg.SMTPPassword})
		if err != nil {
			closeListener(rt)
			return fmt.Errorf("SQLAGENT_SMTP_*: %w", err)
		}
		mail = m
	}
	srv := grpcx.NewServer(rt.Server, rt.Logger)
	db, closeMongo, err := service.ConnectMongo(ctx, cfg.Mongo, srv.Health())
	if err != nil {
		closeListener(rt)
		return err
	}
	defer closeMongo()
	store, err := mongostore.New(ctx, db)
	if err != nil {
		closeListener(rt)
		return err
	}
	if cfg.SchemaChars <= 0 {
		closeListener(rt)
		return fmt.Errorf("SQLAGENT_SCHEMA_CHARS must be positive, got %d", cfg.SchemaChars)
	}
	registry, err := connections.Open(specs, connections.Options{MaxSchemaChars: cfg.SchemaChars})
	if err != nil {
		closeListener(rt)
		return fmt.Errorf("SQLAGENT_CONNECTIONS: %w", err)
	}
	defer registry.Close()
	// The read roles are audited in the background, so a database that is
	// down does not hold up the start; Run waits for the audit before it
	// closes the registry.
	audited := make(chan struct{})
	go func() {
		defer close(audited)
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		logReadRoles(actx, registry, rt.Logger)
	}()
	defer func() { <-audited }()
	modelGateway, err := service.DialPeer(cfg.ModelGatewayAddr)
	if err != nil {
		closeListener(rt)
		return err
	}
	defer modelGateway.Close()

	var kb session.Knowledge
	if cfg.IndexerAddr != "" {
		indexer, err := service.DialPeer(cfg.IndexerAddr)
		if err != nil {
			closeListener(rt)
			return err
		}
		defer indexer.Close()
		kb = knowledge.New(indexerv1.NewSearchServiceClient(indexer))
	}

	gen := sqlgen.New(modelv1.NewModelServiceClient(modelGateway), cfg.SQLModel)
	agent := session.NewAgent(store, registry, gen,
		session.Options{RowLimit: cfg.RowLimit, QueryTimeout: cfg.QueryTimeout, Mailer: mail, EmailRowLimit: cfg.EmailRowLimit,
			ConfirmationWords: splitList(cfg.ConfirmationWords), Router: gen, PromptLogging: cfg.PromptLogging,
			Knowledge: kb, Logger: rt.Logger, SoleWriter: mongox.SingleWriter(db)})
	if cfg.PromptLogging {
		gen.SetLog(agent.LogPrompt)
	}
	sqlagentv1.RegisterSqlAgentServiceServer(srv.GRPC(), grpcapi.New(agent, registry, rt.Logger))
	if rt.Ready != nil {
		rt.Ready()
	}
	return srv.Serve(ctx, rt.Listener)
}

// splitList splits a comma-separated list; empty gives nil.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// closeListener closes the listener when Run fails before serving: Run owns it.
func closeListener(rt service.Runtime) {
	if rt.Listener != nil {
		_ = rt.Listener.Close()
	}
}

// hasConnection reports whether specs configure a connection called name.
func hasConnection(specs []connections.Spec, name string) bool {
	for _, s := range specs {
		if s.Name == name {
			return true
		}
	}
	return false
}

// logReadRoles logs a warning for each PostgreSQL read role or MySQL read
// user with rights beyond reading, or on which the server-side check
// cannot run.
//
// Each connection's audit ends in one line: these warnings, or "read role
// audited" at info level when there is nothing to warn about. An audit cut
// short because the service is stopping (ctx canceled, not timed out) is
// logged at info level: it says nothing about the role.
func logReadRoles(ctx context.Context, registry *connections.Registry, log *slog.Logger) {
	for _, a := range registry.AuditReadRoles(ctx) {
		switch {
		case a.Err != nil && errors.Is(ctx.Err(), context.Canceled):
			log.InfoContext(ctx, "read role not audited: the service stopped first", "connection", a.Connection)
			continue
		case a.Err != nil:
			log.WarnContext(ctx, "could not audit the read role", "connection", a.Connection, "error", a.Err)
			continue
		case len(a.Excess) > 0:
			log.WarnContext(ctx, "the read role may do more than read; configure a least-privilege role as name[read]= in SQLAGENT_CONNECTIONS",
				"connection", a.Connection, "role", a.Role, "rights", strings.Join(a.Excess, ","))
		case len(a.Problems) == 0:
			log.InfoContext(ctx, "read role audited", "connection", a.Connection, "role", a.Role)
		}
		for _, p := range a.Problems {
			log.WarnContext(ctx, "the read connection cannot run the server-side check", "connection", a.Connection, "role", a.Role, "problem", p)
		}
	}
}
