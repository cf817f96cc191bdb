package cli

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
)

func (a *app) usageCmd() *cobra.Command {
	var resolution, of string
	c := &cobra.Command{
		Use:   "usage",
		Short: "tokens per logical model, provider and tenant over the last hour (or day)",
		Long: `Tokens the model gateway counted per logical model, provider and tenant,
per minute over the last hour (--resolution hour: per hour over the last
day), since the model gateway started. A tenant's key sees its own tenant;
an operator key (GATEWAY_API_KEYS entry key=*) sees every tenant, or the one
--of names.`,
		Args: noArgs,
		RunE: a.run(func(ctx context.Context, _ *cobra.Command, _ []string, m *mesh) error {
			r, err := parseEnum(modelv1.UsageResolution(0).Descriptor(), "--resolution", resolution)
			if err != nil {
				return err
			}
			res, err := modelv1.NewModelServiceClient(m.model).GetUsage(ctx, &modelv1.GetUsageRequest{Resolution: modelv1.UsageResolution(r), TenantId: of})
			if err != nil {
				return callErr("read usage", err)
			}
			return a.emit(res, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "TIME\tMODEL\tPROVIDER\tTENANT\tCALLS\tPROMPT\tCOMPLETION\tREASONING")
				for _, p := range res.GetPoints() {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\n", when(p.GetStartTime()), p.GetLogicalModel(), p.GetProvider(), p.GetTenantId(),
						p.GetCalls(), p.GetPromptTokens(), p.GetCompletionTokens(), p.GetReasoningTokens())
				}
			})
		}),
	}
	c.Flags().StringVar(&resolution, "resolution", "minute", "minute (the last hour) or hour (the last day)")
	c.Flags().StringVar(&of, "of", "", "only this tenant (another tenant than your key's needs an operator key)")
	return c
}
