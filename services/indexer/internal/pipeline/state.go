// Package pipeline is the qualifier of seed 000 as intake runs it: one
// state per intake (indexerv1.IntakePipeline) that every phase adds to —
// vision stage 1, content type (rules, then a model when they are
// unsure), vision stage 2, type-specific extraction (e-mail, Jira-like
// ticket, Confluence-like page, log, generic), the indexing plan (base
// node key and base info) — and the model calls of those phases and of
// routing (the route_task tool). Package intake runs it at ingest,
// indexes what it planned, routes in the extraction job and stores the
// state with the document, each phase's part in the write that ends it.
//
// No phase drops what an earlier one found: each writes its own fields
// (SetVision only ever adds), and the store writes later phases to
// their own paths of the record.
package pipeline

import (
	"net/mail"
	"strings"

	"google.golang.org/protobuf/proto"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/services/indexer/internal/extract"
)

// SetVision adds what v found to the state's vision: a field already set
// is kept when v leaves it empty, so stage 2 (or a failed call) never
// erases stage 1.
func SetVision(p *indexerv1.IntakePipeline, v *indexerv1.IntakeVision) {
	if p.Vision == nil {
		p.Vision = &indexerv1.IntakeVision{}
	}
	if s := v.GetGeneralSummary(); s != "" {
		p.Vision.GeneralSummary = s
	}
	if s := v.GetTypeSpecificDetails(); s != "" {
		p.Vision.TypeSpecificDetails = s
	}
	if s := v.GetModel(); s != "" {
		p.Vision.Model = s
	}
}

// eventTextLimit caps, in characters, the free texts of an event's
// state, so an intake of megabytes still makes events far below NATS's
// payload limit (1 MiB by default).
const eventTextLimit = 4000

// ForEvent returns a copy of p light enough for an event: without the
// original text and the chunk ids, with long texts cut.
func ForEvent(p *indexerv1.IntakePipeline) *indexerv1.IntakePipeline {
	if p == nil {
		return nil
	}
	c := proto.Clone(p).(*indexerv1.IntakePipeline)
	c.OriginalText = ""
	if c.Indexing != nil {
		c.Indexing.ChunkIds = nil
		c.Indexing.BaseInfo = clip(c.Indexing.BaseInfo, eventTextLimit)
	}
	if e := c.GetExtraction().GetEmail(); e != nil {
		e.Body = clip(e.Body, eventTextLimit)
		// Each of these at most 2 KiB (ParseEmail): an event stays well
		// under NATS's 1 MB payload.
		e.To, e.Cc, e.References = e.To[:min(len(e.To), 100)], e.Cc[:min(len(e.Cc), 100)], e.References[:min(len(e.References), 20)]
	}
	if cf := c.GetExtraction().GetConfluence(); cf != nil && len(cf.Headings) > 100 {
		cf.Headings = cf.Headings[:100]
	}
	if len(c.Attachments) > 100 {
		c.Attachments = c.Attachments[:100]
	}
	return c
}

// Errors returns every error the phases collected, prefixed with the
// phase's name.
func Errors(p *indexerv1.IntakePipeline) []string {
	var out []string
	for _, ph := range p.GetPhases() {
		for _, e := range ph.GetErrors() {
			out = append(out, ph.GetName()+": "+e)
		}
	}
	return out
}

// Entities lists who and what the extraction names, for the graph's
// MENTIONS edges beside the extracts' entities: an e-mail's sender and
// recipients, a ticket's key, assignee and reporter, a page's author.
func Entities(p *indexerv1.IntakePipeline) []extract.Entity {
	var out []extract.Entity
	person := func(s string) {
		// "Ana Nováková <ana@example.com>" is Ana Nováková; a bare
		// address stands for its owner.
		if a, err := mail.ParseAddress(s); err == nil {
			s = a.Name
			if s == "" {
				s = a.Address
			}
		}
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, extract.Entity{Kind: "person", Name: s})
		}
	}
	x := p.GetExtraction()
	switch {
	case x.GetEmail() != nil:
		e := x.GetEmail()
		person(e.GetFrom())
		for _, a := range append(append([]string(nil), e.GetTo()...), e.GetCc()...) {
			person(a)
		}
	case x.GetJira() != nil:
		j := x.GetJira()
		if j.GetKey() != "" {
			out = append(out, extract.Entity{Kind: "ticket", Name: j.GetKey()})
		}
		person(j.GetAssignee())
		person(j.GetReporter())
	case x.GetConfluence() != nil:
		person(x.GetConfluence().GetAuthor())
	}
	return out
}
