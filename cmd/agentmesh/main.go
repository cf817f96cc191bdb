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
	case "help", "-h", "--help":
		fmt.Print(usage)
		return nil
	default:
		return fmt.Errorf("unknown command %q\n\n%s", args[0], usage)
	}
}
