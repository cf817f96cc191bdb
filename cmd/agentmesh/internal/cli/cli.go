// Package cli holds the agentmesh subcommands that talk to a running mesh
// over gRPC: jobs, classify, indexer and mcp.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/services/classifier/classifycli"
	"github.com/agentmesh/agentmesh/services/orchestrator/jobstree"
)

// Config is where the CLI finds the mesh; the defaults match `agentmesh up`.
type Config struct {
	// OrchestratorAddr is the orchestrator's gRPC address.
	OrchestratorAddr string `env:"ORCHESTRATOR_ADDR" default:"localhost:9092" help:"orchestrator gRPC address"`
	// IndexerAddr is the indexer's gRPC address.
	IndexerAddr string `env:"INDEXER_ADDR" default:"localhost:9094" help:"indexer gRPC address"`
	// ClassifierAddr is the classifier's gRPC address.
	ClassifierAddr string `env:"CLASSIFIER_ADDR" default:"localhost:9095" help:"classifier gRPC address"`
	// SQLAgentAddr is the SQL agent's gRPC address.
	SQLAgentAddr string `env:"SQLAGENT_ADDR" default:"localhost:9096" help:"SQL agent gRPC address"`
	// Tenant is the tenant the CLI acts for.
	Tenant string `env:"AGENTMESH_TENANT" default:"default" help:"tenant the CLI acts for (agentmesh CLI)"`
	// Project is the project the CLI acts for.
	Project string `env:"AGENTMESH_PROJECT" help:"project the CLI acts for (agentmesh CLI)"`
}

func (c *Config) scope() *commonv1.Scope {
	return &commonv1.Scope{TenantId: c.Tenant, ProjectId: c.Project}
}

func (c *Config) dial(addr string) (*grpc.ClientConn, error) { return grpcx.Dial(addr) }

// ErrUsage means the arguments were wrong; the message says how to call.
var ErrUsage = errors.New("usage")

// Jobs runs `agentmesh jobs tree <id>`.
func Jobs(ctx context.Context, cfg *Config, args []string, out io.Writer) error {
	if len(args) != 2 || args[0] != "tree" {
		return fmt.Errorf("%w: agentmesh jobs tree <job-id>", ErrUsage)
	}
	cc, err := cfg.dial(cfg.OrchestratorAddr)
	if err != nil {
		return err
	}
	defer cc.Close()
	res, err := orchestratorv1.NewJobServiceClient(cc).GetJob(ctx, &orchestratorv1.GetJobRequest{Scope: cfg.scope(), JobId: args[1]})
	if err != nil {
		return fmt.Errorf("get job %s: %w", args[1], err)
	}
	return jobstree.Print(out, res.GetJob())
}

// Indexer runs `agentmesh indexer rebuild`.
func Indexer(ctx context.Context, cfg *Config, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("indexer rebuild", flag.ContinueOnError)
	all := fs.Bool("all", false, "rebuild every tenant's indexes, not just AGENTMESH_TENANT's")
	if len(args) == 0 || args[0] != "rebuild" {
		return fmt.Errorf("%w: agentmesh indexer rebuild [-all]", ErrUsage)
	}
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("%w: agentmesh indexer rebuild [-all]", ErrUsage)
	}
	cc, err := cfg.dial(cfg.IndexerAddr)
	if err != nil {
		return err
	}
	defer cc.Close()
	scope := cfg.scope()
	if *all {
		scope = &commonv1.Scope{}
	}
	res, err := indexerv1.NewDocumentServiceClient(cc).RebuildIndexes(ctx, &indexerv1.RebuildIndexesRequest{Scope: scope})
	if err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	fmt.Fprintf(out, "rebuilt the search indexes from the document store: %d documents, %d chunks\n", res.GetDocuments(), res.GetChunks())
	return nil
}

// Classify runs `agentmesh classify import FILE.jsonl`,
// `agentmesh classify [-yes] "instruction"` and
// `agentmesh classify resume <run-id>`.
func Classify(ctx context.Context, cfg *Config, args []string, in io.Reader, out io.Writer) error {
	const usage = `agentmesh classify [-yes] "instruction" | agentmesh classify resume <run-id> | agentmesh classify import FILE.jsonl`
	if len(args) == 0 {
		return fmt.Errorf("%w: %s", ErrUsage, usage)
	}
	cc, err := cfg.dial(cfg.ClassifierAddr)
	if err != nil {
		return err
	}
	defer cc.Close()
	client := classifierv1.NewClassifierServiceClient(cc)
	// The tenant also travels as metadata, as the gateway would send it.
	ctx = metadata.AppendToOutgoingContext(ctx, grpcx.TenantMetadataKey, cfg.Tenant, grpcx.ProjectMetadataKey, cfg.Project)

	switch args[0] {
	case "import":
		if len(args) != 2 {
			return fmt.Errorf("%w: agentmesh classify import FILE.jsonl", ErrUsage)
		}
		f, err := os.Open(args[1])
		if err != nil {
			return err
		}
		defer f.Close()
		res, err := classifycli.Import(ctx, client, classifycli.ImportOptions{Scope: cfg.scope(), Name: args[1]}, f, out)
		if err != nil {
			return err
		}
		if len(res.Rejected) > 0 {
			return fmt.Errorf("%d line(s) rejected", len(res.Rejected))
		}
		return nil
	case "resume":
		if len(args) != 2 {
			return fmt.Errorf("%w: agentmesh classify resume <run-id>", ErrUsage)
		}
		_, err := classifycli.Drive(ctx, client, classifycli.DriveOptions{Scope: cfg.scope(), RunID: args[1]}, in, out)
		return err
	default:
		fs := flag.NewFlagSet("classify", flag.ContinueOnError)
		yes := fs.Bool("yes", false, "approve every fetch and batch without asking")
		if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
			return fmt.Errorf("%w: %s", ErrUsage, usage)
		}
		_, err := classifycli.Drive(ctx, client, classifycli.DriveOptions{Scope: cfg.scope(), Instruction: fs.Arg(0), AutoApprove: *yes}, in, out)
		return err
	}
}
