// Command agentmesh is the agentmesh CLI. `agentmesh up` runs the whole mesh
// on one machine on embedded infrastructure.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentmesh/agentmesh/cmd/agentmesh/internal/cli"
	"github.com/agentmesh/agentmesh/cmd/agentmesh/internal/up"
	"github.com/agentmesh/agentmesh/libs/config"
)

const usage = `agentmesh — run LLM agents in production

Usage:
  agentmesh up        run the whole mesh on this machine (gateway on :8080)
  agentmesh env       print every configuration variable as a Markdown table
  agentmesh jobs tree <job-id>
                      print an analysis job tree with status and timing
  agentmesh classify [-yes] "instruction"
                      run a RESOLVED/UNRESOLVED classification with approval prompts
  agentmesh classify resume <run-id>
                      resume a classification run from its checkpoint
  agentmesh classify import FILE.jsonl
                      import customer conversations (one JSON object a line)
  agentmesh indexer rebuild [-all]
                      rebuild the search indexes from the document store
  agentmesh mcp       serve the mesh's tools to an MCP client on stdin/stdout
                      (documents, analyses, read-only SQL) as AGENTMESH_TENANT
  agentmesh help      show this help

Configuration is read from environment variables; see README.md.
`

const upUsage = `Usage: agentmesh up

Runs the whole mesh in this process: embedded NATS JetStream and FerretDB
(unless NATS_URL / MONGO_URI name real ones), every service on loopback
ports from AGENTMESH_GRPC_BASE_PORT (9091), the gateway and web console on
HTTP_ADDR (:8080), data under AGENTMESH_DATA_DIR (.agentmesh). It prints the
URLs once every component serves; Ctrl-C stops it. Metrics of every service
are on the gateway's /metrics. Every variable: agentmesh env.
`

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "agentmesh:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		fmt.Print(usage)
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case "up":
		if len(args) > 1 {
			// A flag must not start the mesh: --help is a question.
			if isHelp(args[1]) {
				fmt.Print(upUsage)
				return nil
			}
			return fmt.Errorf("up takes no arguments, got %q\n\n%s", args[1:], upUsage)
		}
		return up.Run(ctx, config.Env(), os.Stdout)
	case "jobs", "classify", "indexer", "mcp":
		var cfg cli.Config
		if err := config.Load("", &cfg, config.Env()); err != nil {
			return err
		}
		switch args[0] {
		case "jobs":
			return cli.Jobs(ctx, &cfg, args[1:], os.Stdout)
		case "classify":
			return cli.Classify(ctx, &cfg, args[1:], os.Stdin, os.Stdout)
		case "mcp":
			return cli.MCP(ctx, &cfg, args[1:], os.Stdin, os.Stdout)
		default:
			return cli.Indexer(ctx, &cfg, args[1:], os.Stdout)
		}
	case "env":
		up.PrintVarsTable(os.Stdout)
		return nil
	case "help", "-h", "--help", "-help":
		fmt.Print(usage)
		return nil
	default:
		return fmt.Errorf("unknown command %q\n\n%s", args[0], usage)
	}
}

func isHelp(arg string) bool {
	switch arg {
	case "help", "-h", "--help", "-help":
		return true
	}
	return false
}
