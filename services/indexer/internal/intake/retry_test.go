package intake_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
	"github.com/agentmesh/agentmesh/services/indexer/internal/intake"
)

// TestFailedIngestsAreFinished: an ingest that fails after its first write
// (the document saved, unindexed; the caller got the error) is finished
// while the process runs, as reconciliation finishes one a crash cut:
// before, such a document stayed unsearchable and unextracted until the
// next start. A single writer finishes it within seconds; with many
// writers, once its claim has lapsed (another replica may be ingesting it).
// A document deleted after its ingest failed stays deleted.
func TestFailedIngestsAreFinished(t *testing.T) {
	t.Parallel()
	for _, single := range []bool{true, false} {
		name := map[bool]string{true: "single writer", false: "many writers"}[single]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := testkit.MongoDB(t)
			if single {
				mongox.MarkSingleWriter(db.Client())
			}
			const ttl = 2 * time.Second
			svc, docs := newService(t, db, intake.Config{JobLeaseTTL: ttl})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var (
				mu     sync.Mutex
				failed []string
				fail   = true
			)
			intake.SetAfterSave(svc, func(id string) error {
				mu.Lock()
				defer mu.Unlock()
				if !fail {
					return nil
				}
				failed = append(failed, id)
				return errors.New("the stream is down")
			})
			sc := document.Scope{Tenant: "acme"}
			ingest := func(text string) error {
				_, err := svc.Ingest(ctx, intake.IngestInput{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_WIKI, Title: text, RawContent: text})
				return err
			}
			for _, text := range []string{report, "Rotate the payments keys every quarter."} {
				if err := ingest(text); err == nil {
					t.Fatal("an ingest whose first write was followed by an error succeeded")
				}
			}
			mu.Lock()
			fail = false
			kept, deleted := failed[0], failed[1]
			mu.Unlock()
			if err := svc.Delete(ctx, sc, deleted); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			go svc.FinishFailedIngests(ctx)
			testkit.Eventually(t, 15*time.Second, func() bool {
				d, err := docs.GetDocument(ctx, sc, kept)
				return err == nil && d.Indexed && d.ExtractionJobID != ""
			}, "the failed ingest is finished")
			took := time.Since(start)
			t.Logf("finished %v after the retries began", took.Round(time.Millisecond))
			if single && took > 5*time.Second {
				t.Errorf("a single writer finished the failed ingest after %v; want within seconds", took)
			}
			if !single && took < ttl/2 {
				t.Errorf("many writers finished the failed ingest after %v, before its claim could lapse", took)
			}
			if _, err := docs.GetDocument(ctx, sc, deleted); !errors.Is(err, document.ErrNotFound) {
				t.Errorf("the deleted document after the retries: %v; want it still gone", err)
			}
		})
	}
}
