package cli_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/cmd/agentmesh/internal/cli"
)

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	cfg := &cli.Config{Tenant: "t"}
	ctx := context.Background()
	var out bytes.Buffer
	for name, err := range map[string]error{
		"jobs without id":       cli.Jobs(ctx, cfg, []string{"tree"}, &out),
		"jobs unknown":          cli.Jobs(ctx, cfg, []string{"list"}, &out),
		"indexer unknown":       cli.Indexer(ctx, cfg, []string{"drop"}, &out),
		"classify nothing":      cli.Classify(ctx, cfg, nil, strings.NewReader(""), &out),
		"classify import no fn": cli.Classify(ctx, cfg, []string{"import"}, strings.NewReader(""), &out),
	} {
		if !errors.Is(err, cli.ErrUsage) {
			t.Errorf("%s: err = %v, want a usage error", name, err)
		}
	}
}
