package cli

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
)

func (a *app) docsCmd() *cobra.Command {
	return group("docs", "ingest, read, search and delete documents",
		a.docsIngestCmd(), a.docsGetCmd(), a.docsListCmd(), a.docsSearchCmd(), a.docsDeleteCmd())
}

func docsClient(m *mesh) indexerv1.DocumentServiceClient {
	return indexerv1.NewDocumentServiceClient(m.indexer)
}

func (a *app) docsGetCmd() *cobra.Command {
	var content bool
	c := &cobra.Command{
		Use:   "get DOCUMENT_ID",
		Short: "show a document, its routing and extracts",
		Args:  exactArgs(1, "a document id"),
		RunE: a.run(func(ctx context.Context, _ *cobra.Command, args []string, m *mesh) error {
			res, err := docsClient(m).GetDocument(ctx, &indexerv1.GetDocumentRequest{Scope: m.scope(), DocumentId: args[0]})
			if err != nil {
				return callErr("get document "+args[0], err)
			}
			d := res.GetDocument()
			return a.emit(res, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "ID:\t%s\nTITLE:\t%s\nTYPE:\t%s\nCONTENT TYPE:\t%s\n", d.GetId(), d.GetTitle(), enumName(d.GetSourceType()), d.GetContentType())
				fmt.Fprintf(w, "ROUTING:\t%s %s\nCHUNKS:\t%d\nEXTRACTS:\t%d\nCREATED:\t%s\n", enumName(d.GetRouting()), d.GetRoutingReason(), d.GetChunkCount(), len(d.GetExtracts()), when(d.GetCreateTime()))
				if d.GetExtractionJobId() != "" {
					fmt.Fprintf(w, "EXTRACTION:\t%s %s\n", d.GetExtractionJobId(), enumName(d.GetExtractionStatus()))
				}
				if d.GetLiftedJobId() != "" {
					fmt.Fprintf(w, "LIFTED TO:\tjob %s\n", d.GetLiftedJobId())
				}
				if content {
					fmt.Fprintf(w, "\n%s\n", d.GetRawContent())
				}
			})
		}),
	}
	c.Flags().BoolVar(&content, "content", false, "print the document's text too")
	return c
}

func (a *app) docsListCmd() *cobra.Command {
	var typeName, pageToken string
	var limit int32
	c := &cobra.Command{
		Use:   "list",
		Short: "list documents",
		Args:  noArgs,
		RunE: a.run(func(ctx context.Context, _ *cobra.Command, _ []string, m *mesh) error {
			st, err := parseEnum(indexerv1.SourceType(0).Descriptor(), "--type", typeName)
			if err != nil {
				return err
			}
			res, err := docsClient(m).ListDocuments(ctx, &indexerv1.ListDocumentsRequest{Scope: m.scope(), SourceType: indexerv1.SourceType(st), PageSize: limit, PageToken: pageToken})
			if err != nil {
				return callErr("list documents", err)
			}
			return a.emit(res, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "ID\tTYPE\tROUTING\tCHUNKS\tTITLE\tCREATED")
				for _, d := range res.GetDocuments() {
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\n", d.GetId(), enumName(d.GetSourceType()), enumName(d.GetRouting()), d.GetChunkCount(), clip(d.GetTitle(), 48), when(d.GetCreateTime()))
				}
				nextPage(w, res.GetNextPageToken())
			})
		}),
	}
	c.Flags().StringVar(&typeName, "type", "", "only documents of this source type")
	pageFlags(c, &limit, &pageToken, "documents")
	return c
}

func (a *app) docsSearchCmd() *cobra.Command {
	var limit int32
	var modeName string
	c := &cobra.Command{
		Use:   "search QUERY",
		Short: "search the documents (BM25 and vectors)",
		Args:  exactArgs(1, "a query, quoted"),
		RunE: a.run(func(ctx context.Context, _ *cobra.Command, args []string, m *mesh) error {
			mode, err := parseEnum(indexerv1.SearchMode(0).Descriptor(), "--mode", modeName)
			if err != nil {
				return err
			}
			res, err := indexerv1.NewSearchServiceClient(m.indexer).Search(ctx, &indexerv1.SearchRequest{Scope: m.scope(), Query: args[0], Limit: limit, Mode: indexerv1.SearchMode(mode)})
			if err != nil {
				return callErr("search", err)
			}
			return a.emit(res, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "SCORE\tDOCUMENT\tTITLE\tTEXT")
				for _, h := range res.GetHits() {
					fmt.Fprintf(w, "%.3f\t%s\t%s\t%s\n", h.GetScore(), h.GetDocumentId(), clip(h.GetTitle(), 32), clip(h.GetText(), 80))
				}
			})
		}),
	}
	limit = 10
	c.Flags().Var(&boundedInt{p: &limit, min: 1, max: 100}, "limit", "hits to return (1 to 100)")
	c.Flags().StringVar(&modeName, "mode", "", "hybrid (default), keyword or vector")
	return c
}

func (a *app) docsDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "delete DOCUMENT_ID",
		Short: "delete a document and its chunks, extracts and graph facts",
		Args:  exactArgs(1, "a document id"),
		RunE: a.run(func(ctx context.Context, _ *cobra.Command, args []string, m *mesh) error {
			if _, err := docsClient(m).DeleteDocument(ctx, &indexerv1.DeleteDocumentRequest{Scope: m.scope(), DocumentId: args[0]}); err != nil {
				return callErr("delete document "+args[0], err)
			}
			fmt.Fprintf(a.io.Err, "deleted document %s\n", args[0])
			return nil
		}),
	}
}
