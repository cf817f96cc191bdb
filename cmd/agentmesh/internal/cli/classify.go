package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/services/classifier/classifycli"
)

func (a *app) classifyCmd() *cobra.Command {
	var yes bool
	c := &cobra.Command{
		Use:   `classify [--yes] "INSTRUCTION"`,
		Short: "run a RESOLVED/UNRESOLVED classification with approval prompts",
		Long: `Starts a classification run and follows it: the plan, the fetched
conversations and each batch of labels are shown, and you approve, reject
with feedback, or stop at every approval (--yes approves them all). If the
input ends at a prompt, the run waits: agentmesh classify resume RUN_ID.`,
		Args: exactArgs(1, "the instruction, quoted"),
		RunE: a.run(func(ctx context.Context, _ *cobra.Command, args []string, m *mesh) error {
			_, err := classifycli.Drive(ctx, classifierClient(m), classifycli.DriveOptions{Scope: m.scope(), Instruction: args[0], AutoApprove: yes}, a.input(ctx), a.io.Out)
			return err
		}),
	}
	c.Flags().BoolVarP(&yes, "yes", "y", false, "approve every fetch and batch without asking")
	c.AddCommand(a.classifyResumeCmd(), a.classifyImportCmd(), a.classifyListCmd(), a.classifyGetCmd())
	return c
}

func classifierClient(m *mesh) classifierv1.ClassifierServiceClient {
	return classifierv1.NewClassifierServiceClient(m.classifier)
}

func (a *app) classifyResumeCmd() *cobra.Command {
	var yes bool
	c := &cobra.Command{
		Use:   "resume RUN_ID",
		Short: "resume a classification run from its checkpoint",
		Args:  exactArgs(1, "a run id"),
		RunE: a.run(func(ctx context.Context, _ *cobra.Command, args []string, m *mesh) error {
			_, err := classifycli.Drive(ctx, classifierClient(m), classifycli.DriveOptions{Scope: m.scope(), RunID: args[0], AutoApprove: yes}, a.input(ctx), a.io.Out)
			return err
		}),
	}
	c.Flags().BoolVarP(&yes, "yes", "y", false, "approve every fetch and batch without asking")
	return c
}

func (a *app) classifyImportCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "import FILE.jsonl",
		Short: "import customer conversations (one JSON object a line; - reads stdin)",
		Args:  exactArgs(1, "a JSON Lines file"),
		RunE: a.run(func(ctx context.Context, _ *cobra.Command, args []string, m *mesh) error {
			var in io.Reader = a.io.In
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return usagef("%v", err)
				}
				defer f.Close()
				if st, err := f.Stat(); err == nil && st.IsDir() {
					return usagef("%s is a directory: give a JSON Lines file", args[0])
				}
				in = f
			}
			res, err := classifycli.Import(ctx, classifierClient(m), classifycli.ImportOptions{Scope: m.scope(), Name: args[0]}, in, a.io.Out)
			if err != nil {
				return err
			}
			if len(res.Rejected) > 0 {
				return &exitError{code: ExitRefused, err: fmt.Errorf("%d line(s) rejected", len(res.Rejected))}
			}
			return nil
		}),
	}
}

func (a *app) classifyListCmd() *cobra.Command {
	var stateName, pageToken string
	var limit int32
	c := &cobra.Command{
		Use:   "list",
		Short: "list classification runs",
		Args:  noArgs,
		RunE: a.run(func(ctx context.Context, _ *cobra.Command, _ []string, m *mesh) error {
			st, err := parseEnum(classifierv1.RunState(0).Descriptor(), "--state", stateName)
			if err != nil {
				return err
			}
			res, err := classifierClient(m).ListRuns(ctx, &classifierv1.ListRunsRequest{Scope: m.scope(), State: classifierv1.RunState(st), PageSize: limit, PageToken: pageToken})
			if err != nil {
				return callErr("list runs", err)
			}
			return a.emit(res, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "ID\tSTATE\tLABELLED\tINSTRUCTION\tUPDATED")
				for _, r := range res.GetRuns() {
					fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", r.GetId(), enumName(r.GetState()), r.GetLabelledCount(), clip(r.GetInstruction(), 48), when(r.GetUpdateTime()))
				}
				nextPage(w, res.GetNextPageToken())
			})
		}),
	}
	c.Flags().StringVar(&stateName, "state", "", "only runs in this state, e.g. awaiting_batch_approval")
	pageFlags(c, &limit, &pageToken, "runs")
	return c
}

func (a *app) classifyGetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "get RUN_ID",
		Short: "show a classification run",
		Args:  exactArgs(1, "a run id"),
		RunE: a.run(func(ctx context.Context, _ *cobra.Command, args []string, m *mesh) error {
			res, err := classifierClient(m).GetRun(ctx, &classifierv1.GetRunRequest{Scope: m.scope(), RunId: args[0]})
			if err != nil {
				return callErr("get run "+args[0], err)
			}
			r := res.GetRun()
			return a.emit(res, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "ID:\t%s\nSTATE:\t%s\nINSTRUCTION:\t%s\nLABELLED:\t%d\nMODEL CALLS:\t%d\nUPDATED:\t%s\n", r.GetId(), enumName(r.GetState()), r.GetInstruction(), r.GetLabelledCount(), r.GetModelCalls(), when(r.GetUpdateTime()))
				if r.GetStopReason() != "" {
					fmt.Fprintf(w, "STOPPED:\t%s\n", r.GetStopReason())
				}
				if r.GetSummary() != "" {
					fmt.Fprintf(w, "\n%s\n", r.GetSummary())
				}
			})
		}),
	}
}

func (a *app) indexerCmd() *cobra.Command {
	var all bool
	rebuild := &cobra.Command{
		Use:   "rebuild",
		Short: "rebuild the search indexes from the document store",
		Args:  noArgs,
		RunE: a.run(func(ctx context.Context, _ *cobra.Command, _ []string, m *mesh) error {
			scope := m.scope()
			if all {
				if m.gateway != nil {
					return usagef("--all rebuilds every tenant's indexes, which only a direct call may do: add --grpc (INDEXER_ADDR)")
				}
				scope = &commonv1.Scope{}
			}
			res, err := docsClient(m).RebuildIndexes(ctx, &indexerv1.RebuildIndexesRequest{Scope: scope})
			if err != nil {
				return callErr("rebuild", err)
			}
			return a.emit(res, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "rebuilt the search indexes from the document store: %d documents, %d chunks\n", res.GetDocuments(), res.GetChunks())
			})
		}),
	}
	rebuild.Flags().BoolVar(&all, "all", false, "rebuild every tenant's indexes, not just AGENTMESH_TENANT's (needs --grpc)")
	return group("indexer", "maintain the indexer", rebuild)
}
