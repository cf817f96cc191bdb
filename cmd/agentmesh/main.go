// Command agentmesh is the agentmesh CLI: `agentmesh up` runs the whole mesh
// on one machine on embedded infrastructure, and the other commands (package
// cli) use a running mesh through its gateway.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/agentmesh/agentmesh/cmd/agentmesh/internal/cli"
	"github.com/agentmesh/agentmesh/cmd/agentmesh/internal/up"
	"github.com/agentmesh/agentmesh/libs/config"
)

const upLong = `Runs the whole mesh in this process: embedded NATS JetStream and FerretDB
(unless NATS_URL / MONGO_URI name real ones), every service on loopback
ports from AGENTMESH_GRPC_BASE_PORT (9091), the gateway and web console on
HTTP_ADDR (127.0.0.1:8080), data under AGENTMESH_DATA_DIR (.agentmesh). It prints the
URLs once every component serves; Ctrl-C stops it. Metrics of every service
are on the gateway's /metrics. Every variable: agentmesh env.`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], cli.Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	stop()
	os.Exit(code)
}

// run executes one command line and returns its exit code.
func run(ctx context.Context, args []string, s cli.Streams) int {
	var cfg cli.Config
	if err := config.Load("", &cfg, config.Env()); err != nil {
		fmt.Fprintln(s.Err, "agentmesh:", err)
		return cli.ExitUsage
	}
	root := cli.NewRoot(&cfg, s)
	root.AddCommand(&cobra.Command{
		Use:   "up",
		Short: "run the whole mesh on this machine (gateway on :8080)",
		Long:  upLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return up.Run(cmd.Context(), config.Env(), s.Out)
		},
	}, &cobra.Command{
		Use:   "env",
		Short: "print every configuration variable as a Markdown table",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			up.PrintVarsTable(s.Out)
			return nil
		},
	})
	return cli.Execute(ctx, root, args)
}
