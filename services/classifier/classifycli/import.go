// Package classifycli is the terminal side of classification runs, for the
// agentmesh CLI: Import loads a JSON Lines file of conversations
// (`agentmesh classify import FILE.jsonl`) and prints the rejected lines;
// Drive runs a classification (`agentmesh classify`) with approval prompts
// and a progress bar. Both talk to the classifier only through its gRPC
// client, so they work against a local mesh or a remote one alike.
package classifycli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
)

// Import limits.
const (
	// DefaultChunkLines is how many lines one ImportConversations request
	// carries.
	DefaultChunkLines = 1000
	// maxChunkBytes keeps a request well below the server's message limit.
	maxChunkBytes = 8 << 20
	// maxLineBytes is the longest line read.
	maxLineBytes = 4 << 20
)

// ImportOptions configures Import.
type ImportOptions struct {
	// Scope is the tenant and project to import into. Required.
	Scope *commonv1.Scope
	// ChunkLines is the lines per request; 0 means DefaultChunkLines.
	ChunkLines int
	// Name names the input in messages, e.g. the file name.
	Name string
}

// Rejected is one line the server refused.
type Rejected struct {
	// Line is the 1-based line of the input.
	Line int
	// Reason names the field and the problem.
	Reason string
}

// ImportResult totals an import.
type ImportResult struct {
	// Imported counts conversations stored (new or replaced).
	Imported int
	// Rejected lists refused lines in input order.
	Rejected []Rejected
}

// Import reads JSON Lines from r (one conversation per line, the API's JSON
// form), sends them in chunks, and prints what was imported and every
// rejected line, numbered as in the input, to out. A conversation whose id
// repeats within one chunk is rejected; across chunks the later line
// replaces the earlier one, as a second import would. It returns the totals;
// an error means the import stopped (the chunks before it were stored).
func Import(ctx context.Context, client classifierv1.ClassifierServiceClient, opts ImportOptions, r io.Reader, out io.Writer) (ImportResult, error) {
	if opts.ChunkLines <= 0 {
		opts.ChunkLines = DefaultChunkLines
	}
	if opts.Name == "" {
		opts.Name = "input"
	}
	var res ImportResult
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLineBytes)
	var chunk strings.Builder
	lines, first, line := 0, 1, 0
	flush := func() error {
		if lines == 0 {
			return nil
		}
		resp, err := client.ImportConversations(ctx, &classifierv1.ImportConversationsRequest{Scope: opts.Scope, Jsonl: chunk.String()})
		if err != nil {
			return fmt.Errorf("import lines %d-%d of %s: %w", first, first+lines-1, opts.Name, err)
		}
		res.Imported += int(resp.GetImported())
		for _, rej := range resp.GetRejected() {
			res.Rejected = append(res.Rejected, Rejected{Line: first + int(rej.GetLine()) - 1, Reason: rej.GetReason()})
		}
		chunk.Reset()
		first += lines
		lines = 0
		return nil
	}
	for sc.Scan() {
		line++
		chunk.WriteString(sc.Text())
		chunk.WriteByte('\n')
		lines++
		if lines == opts.ChunkLines || chunk.Len() >= maxChunkBytes {
			if err := flush(); err != nil {
				return res, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("line %d is longer than %d bytes", line+1, maxLineBytes)
		}
		return res, fmt.Errorf("read %s: %w", opts.Name, err)
	}
	if err := flush(); err != nil {
		return res, err
	}
	fmt.Fprintf(out, "Imported %d conversations from %s", res.Imported, opts.Name)
	if len(res.Rejected) == 0 {
		fmt.Fprintln(out, ".")
		return res, nil
	}
	fmt.Fprintf(out, "; %d lines rejected:\n", len(res.Rejected))
	for _, rej := range res.Rejected {
		fmt.Fprintf(out, "  line %d: %s\n", rej.Line, rej.Reason)
	}
	return res, nil
}
