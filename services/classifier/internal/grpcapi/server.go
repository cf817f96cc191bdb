// Package grpcapi implements agentmesh.classifier.v1.ClassifierService: it
// validates requests, resolves each request's scope, maps domain errors to
// gRPC status codes, and streams a run's events to the caller.
//
// A stream's events are read back from JetStream (the relay publishes them
// from the run's checkpoint outbox), not handed over in memory. Each carries
// its sequence within its run (1, 2, 3...: numbered when the checkpoint
// records it, never the JetStream sequence, which all tenants share), so
// the gateway uses it as the SSE event id and a client that reconnects
// (ResumeRun's after_sequence) replays exactly what it missed. The stream
// ends once the executor has stopped (the run waits for a human, finished,
// or failed) and its last recorded event has been sent.
package grpcapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agentmesh/agentmesh/libs/events"
	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/services/classifier/internal/checkpoint"
	"github.com/agentmesh/agentmesh/services/classifier/internal/conversations"
	"github.com/agentmesh/agentmesh/services/classifier/internal/runevents"
	"github.com/agentmesh/agentmesh/services/classifier/internal/runner"
	"github.com/agentmesh/agentmesh/services/classifier/internal/statemachine"
)

// Paging limits; the contract states the other request limits.
const (
	defaultPageSize = 50
	maxPageSize     = 500
)

// Server implements ClassifierService. It is safe for concurrent use.
type Server struct {
	classifierv1.UnimplementedClassifierServiceServer

	runner        *runner.Runner
	checkpoints   *checkpoint.Store
	conversations *conversations.Store
	bus           *events.Bus
	log           *slog.Logger
	flushTimeout  time.Duration
}

// Deps are what the Server serves from.
type Deps struct {
	// Runner drives runs.
	Runner *runner.Runner
	// Checkpoints reads runs for GetRun and ListRuns.
	Checkpoints *checkpoint.Store
	// Conversations stores imports.
	Conversations *conversations.Store
	// Bus reads run events back from JetStream.
	Bus *events.Bus
	// Logger logs skipped events; nil discards.
	Logger *slog.Logger
	// FlushTimeout bounds how long a stream waits, after the executor
	// stopped, for its last events to arrive from JetStream. Default 30s.
	FlushTimeout time.Duration
}

// New returns a Server.
func New(d Deps) *Server {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.FlushTimeout <= 0 {
		d.FlushTimeout = 30 * time.Second
	}
	return &Server{
		runner: d.Runner, checkpoints: d.Checkpoints, conversations: d.Conversations, bus: d.Bus,
		log: d.Logger, flushTimeout: d.FlushTimeout,
	}
}

var _ classifierv1.ClassifierServiceServer = (*Server)(nil)

func runID(id string) (string, error) {
	id = strings.TrimSpace(id)
	if id == "" {
		return "", grpcx.InvalidArgument("run_id", "is required")
	}
	if strings.ContainsAny(id, ".*> \t\n") { // run ids name NATS subjects
		return "", grpcx.InvalidArgument("run_id", "is not a run id")
	}
	return id, nil
}

// StartRun starts a run and streams its events until it waits or ends.
func (s *Server) StartRun(req *classifierv1.StartRunRequest, stream classifierv1.ClassifierService_StartRunServer) error {
	ctx := stream.Context()
	scope, err := grpcx.Scope(ctx, req.GetScope())
	if err != nil {
		return err
	}
	// The contract bounds the instruction to 4000 bytes; blank is none.
	instruction := strings.TrimSpace(req.GetInstruction())
	if instruction == "" {
		return grpcx.InvalidArgument("instruction", "is required")
	}
	return s.drive(ctx, scope, "", 0, func() (*runner.Drive, error) { return s.runner.Start(ctx, scope, instruction) }, func(ev *classifierv1.RunEvent) error {
		return stream.Send(&classifierv1.StartRunResponse{Event: ev})
	})
}

// ResumeRun continues a run from its checkpoint. While another executor
// holds the run, the stream follows it: that executor's events, as they
// come, until the run waits or finishes; if it lets go of the run mid-step
// (or dies), this request takes the run over.
//
// A finished run (Completed, Stopped) has nothing to continue. With
// after_sequence the caller is a client whose stream was cut, maybe just
// before the end: it gets the run's events after that one, and the stream
// ends (nothing runs; after the last event, the stream is empty). Without
// it the answer stays FailedPrecondition RUN_FINISHED: a client with no
// position asks to continue, and GetRun shows the final state.
func (s *Server) ResumeRun(req *classifierv1.ResumeRunRequest, stream classifierv1.ClassifierService_ResumeRunServer) error {
	ctx := stream.Context()
	scope, err := grpcx.Scope(ctx, req.GetScope())
	if err != nil {
		return err
	}
	id, err := runID(req.GetRunId())
	if err != nil {
		return err
	}
	after := req.GetAfterSequence()
	resume := func() (*runner.Drive, error) {
		d, err := s.runner.Resume(ctx, scope, id)
		if after > 0 && errors.Is(err, statemachine.ErrFinished) {
			return s.runner.Recorded(ctx, scope, id)
		}
		return d, err
	}
	return s.drive(ctx, scope, id, after, resume, func(ev *classifierv1.RunEvent) error {
		return stream.Send(&classifierv1.ResumeRunResponse{Event: ev})
	})
}

// SendCommand applies a command and streams what follows.
func (s *Server) SendCommand(req *classifierv1.SendCommandRequest, stream classifierv1.ClassifierService_SendCommandServer) error {
	ctx := stream.Context()
	scope, err := grpcx.Scope(ctx, req.GetScope())
	if err != nil {
		return err
	}
	id, err := runID(req.GetRunId())
	if err != nil {
		return err
	}
	cmd := commandFromProto[req.GetType()] // the contract admits only commands
	feedback := strings.TrimSpace(req.GetFeedback())
	if feedback != "" && cmd != statemachine.RejectFetch && cmd != statemachine.RejectBatch {
		return grpcx.InvalidArgument("feedback", "only RejectFetch and RejectBatch take feedback")
	}
	return s.drive(ctx, scope, id, 0, func() (*runner.Drive, error) { return s.runner.Command(ctx, scope, id, cmd, feedback) }, func(ev *classifierv1.RunEvent) error {
		return stream.Send(&classifierv1.SendCommandResponse{Event: ev})
	})
}

// GetRun returns the run context. A run whose checkpoint cannot be decoded
// is shown with what its header says and why.
func (s *Server) GetRun(ctx context.Context, req *classifierv1.GetRunRequest) (*classifierv1.GetRunResponse, error) {
	scope, err := grpcx.Scope(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	id, err := runID(req.GetRunId())
	if err != nil {
		return nil, err
	}
	rec, err := s.checkpoints.Load(ctx, scope, id)
	if c, ok := asCorrupt(err); ok {
		return &classifierv1.GetRunResponse{Run: corruptToProto(scope, c)}, nil
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return &classifierv1.GetRunResponse{Run: runToProto(rec)}, nil
}

// ListRuns lists the scope's runs, newest first.
func (s *Server) ListRuns(ctx context.Context, req *classifierv1.ListRunsRequest) (*classifierv1.ListRunsResponse, error) {
	scope, err := grpcx.Scope(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	state, _ := stateFromProto(req.GetState()) // the contract admits only states
	size := int64(req.GetPageSize())
	switch {
	case size == 0:
		size = defaultPageSize
	case size > maxPageSize:
		size = maxPageSize
	}
	from, to, err := grpcx.CreateTimeRange(req.GetCreateTimeFrom(), req.GetCreateTimeTo())
	if err != nil {
		return nil, err
	}
	hash := filterHash(scope, state, from, to)
	var offset int64
	if tok := req.GetPageToken(); tok != "" {
		pt, err := grpcx.DecodePageToken(tok, hash)
		if err != nil {
			return nil, err
		}
		if pt.GetOffset() < 0 {
			return nil, grpcx.InvalidArgument("page_token", "is not a token this service issued")
		}
		offset = pt.GetOffset()
	}
	entries, err := s.checkpoints.List(ctx, scope, checkpoint.ListOptions{
		State: state, Offset: offset, Limit: size + 1, CreatedFrom: from, CreatedTo: to,
	})
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &classifierv1.ListRunsResponse{}
	if int64(len(entries)) > size {
		entries = entries[:size]
		resp.NextPageToken = grpcx.EncodePageToken(&commonv1.PageToken{Offset: offset + size, FilterHash: hash})
	}
	for _, e := range entries {
		if e.Corrupt != nil {
			resp.Runs = append(resp.Runs, corruptToProto(scope, e.Corrupt))
			continue
		}
		resp.Runs = append(resp.Runs, runToProto(e.Record))
	}
	return resp, nil
}

// filterHash binds a page token to the listing's scope and filter.
func filterHash(scope *commonv1.Scope, state statemachine.State, from, to time.Time) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%s\x00%d\x00%d", scope.GetTenantId(), scope.GetProjectId(), state,
		unixNanoOrZero(from), unixNanoOrZero(to)))
	return hex.EncodeToString(sum[:8])
}

// ImportConversations validates and stores conversations, given as a list
// or as JSON Lines, and reports every rejected one by line.
func (s *Server) ImportConversations(ctx context.Context, req *classifierv1.ImportConversationsRequest) (*classifierv1.ImportConversationsResponse, error) {
	scope, err := grpcx.Scope(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	list, jsonl := req.GetConversations(), req.GetJsonl()
	switch {
	case len(list) > 0 && strings.TrimSpace(jsonl) != "":
		return nil, grpcx.InvalidArgument("jsonl", "set either conversations or jsonl, not both")
	case len(list) == 0 && strings.TrimSpace(jsonl) == "":
		return nil, grpcx.InvalidArgument("conversations", "is required (or jsonl)")
	case len(list) > conversations.MaxImport:
		return nil, grpcx.InvalidArgument("conversations", "more than %d in one request", conversations.MaxImport)
	}
	var (
		parsed   []conversations.Parsed
		rejected []conversations.Rejection
	)
	if len(list) > 0 {
		parsed, rejected = conversations.Validate(list, 1, map[string]int{})
	} else {
		parsed, rejected, err = conversations.ParseJSONL(strings.NewReader(jsonl), map[string]int{})
		if err != nil {
			return nil, grpcx.InvalidArgument("jsonl", "%v", err)
		}
	}
	valid := make([]conversations.Conversation, len(parsed))
	for i, p := range parsed {
		valid[i] = p.Conversation
	}
	n, err := s.conversations.Upsert(ctx, scope, valid)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &classifierv1.ImportConversationsResponse{Imported: int32(n)}
	for _, r := range rejected {
		resp.Rejected = append(resp.Rejected, &classifierv1.RejectedLine{Line: int32(r.Line), Reason: r.Reason})
	}
	return resp, nil
}

// drive notes where the event stream ends, runs start (which moves the run
// on and returns once it waits or ends), and forwards the run's events
// from that point: what every streaming RPC of the service does. With
// after > 0 (ResumeRun's after_sequence, a per-run sequence of run id) the
// run's events after that one come first: the stream ends only once the
// executor's last event was sent, and every resume records at least one
// event, after all those already stored.
func (s *Server) drive(ctx context.Context, scope *commonv1.Scope, id string, after uint64, start func() (*runner.Drive, error), send func(*classifierv1.RunEvent) error) error {
	from, err := s.tail(ctx)
	if err != nil {
		return err
	}
	if after > 0 {
		// A run that cannot be read is left to start, which reports it.
		if rec, err := s.checkpoints.Load(ctx, scope, id); err == nil && after > rec.EventCount {
			return grpcx.InvalidArgument("after_sequence", "run %s has %d events: use the sequence of an event it streamed", id, rec.EventCount)
		}
		// The run's events are read from the start of the stream (its
		// subject filter skips other runs'); forward drops those up to
		// after.
		from = 0
	}
	d, err := start()
	if err != nil {
		return toStatus(err)
	}
	return s.forward(ctx, scope, d, from, after, send)
}

// tail returns the events stream's last sequence: a request's stream
// forwards the run's events stored after it.
func (s *Server) tail(ctx context.Context) (uint64, error) {
	// Stream reads the stream's info (one request to the server): its
	// state is the tail, with no second request of Info.
	st, err := s.bus.JetStream().Stream(ctx, events.StreamEvents)
	if err != nil {
		return 0, grpcx.Errorf(codes.Unavailable, "EVENTS_UNAVAILABLE", "event stream unavailable: %v", err)
	}
	return st.CachedInfo().State.LastSeq, nil
}

// forward sends the run's events stored after JetStream sequence from, as
// JetStream returns them, skipping any whose run sequence is not past the
// highest sent so far (starting at after): the events a reconnecting client
// already has, and an event the relay published twice. It returns once the
// executor has stopped and its last recorded event was sent. If the client
// goes away the executor carries on; the run's events stay in JetStream
// for a replay.
func (s *Server) forward(ctx context.Context, scope *commonv1.Scope, drive *runner.Drive, from, after uint64, send func(*classifierv1.RunEvent) error) error {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := make(chan *classifierv1.RunEvent)
	replayErr := make(chan error, 1)
	go func() {
		replayErr <- s.bus.Replay(rctx, events.StreamEvents, runevents.SubjectFilter(scope.GetTenantId(), drive.RunID), from,
			func(_ uint64, env *commonv1.Event) error {
				ev, err := runevents.Decode(env)
				if err != nil {
					s.log.Warn("skipped undecodable run event", slog.String("run_id", drive.RunID), slog.Any("error", err))
					return nil
				}
				select {
				case ch <- ev:
					return nil
				case <-rctx.Done():
					return rctx.Err()
				}
			})
	}()

	sent := after
	done := drive.Done()
	var (
		last     uint64
		driveErr error
		deadline <-chan time.Time
	)
	for {
		select {
		case ev := <-ch:
			// Sequence 0: an event from before runs numbered theirs.
			if seq := ev.GetSequence(); seq != 0 && seq <= sent {
				continue
			}
			if err := send(ev); err != nil {
				return err
			}
			sent = max(sent, ev.GetSequence())
			if done == nil && sent >= last {
				return driveStatus(drive.RunID, driveErr)
			}
		case <-done:
			done = nil
			last, driveErr = drive.Result()
			if sent >= last {
				return driveStatus(drive.RunID, driveErr)
			}
			timer := time.NewTimer(s.flushTimeout)
			defer timer.Stop()
			deadline = timer.C
		case <-deadline:
			return grpcx.Errorf(codes.Unavailable, ReasonEventsUndelivered,
				"run %s: events were not delivered within %s; GetRun shows its state, and a replay from the last event id shows the rest", drive.RunID, s.flushTimeout)
		case err := <-replayErr:
			if ctx.Err() != nil {
				return toStatus(ctx.Err())
			}
			return grpcx.Errorf(codes.Unavailable, ReasonEventsUndelivered, "run %s: reading events: %v", drive.RunID, err)
		case <-ctx.Done():
			return toStatus(ctx.Err())
		}
	}
}

// driveStatus is the stream's final status: nil when the executor stopped
// because the run waits or finished.
func driveStatus(id string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, checkpoint.ErrCorrupt), errors.Is(err, runner.ErrBusy):
		return toStatus(err)
	case errors.Is(err, context.Canceled):
		return grpcx.Errorf(codes.Unavailable, ReasonRunInterrupted, "run %s: the service is shutting down; resume the run", id)
	}
	// The cause (a database error, say) was logged by the runner; it is
	// not for the wire.
	return grpcx.Errorf(codes.Unavailable, ReasonRunInterrupted, "run %s was interrupted by an internal error; resume it to continue from its checkpoint", id)
}

// unixNanoOrZero is t in Unix nanoseconds, 0 for the zero time.
func unixNanoOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}
