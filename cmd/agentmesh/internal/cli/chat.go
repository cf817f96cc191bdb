package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
)

func (a *app) chatCmd() *cobra.Command {
	var conversation string
	var reasoning bool
	c := &cobra.Command{
		Use:   "chat [MESSAGE]",
		Short: "chat with the agent; the answer streams as it is written",
		Long: `Sends MESSAGE and streams the answer to stdout, tool calls and the turn's
summary to stderr. Without MESSAGE it is a session: each line read is a turn
of the same conversation, until end of input (Ctrl-D) or /exit.
--conversation continues an existing conversation. With -o json every
streamed event is printed as one JSON object a line.`,
		Args: cobra.MaximumNArgs(1),
		RunE: a.run(func(ctx context.Context, _ *cobra.Command, args []string, m *mesh) error {
			conv := orchestratorv1.NewConversationServiceClient(m.orchestrator)
			if len(args) == 1 {
				// Before a conversation is created for it.
				if err := checkText(&orchestratorv1.StreamMessageRequest{Content: args[0]}); err != nil {
					return err
				}
			}
			if conversation == "" {
				res, err := conv.CreateConversation(ctx, &orchestratorv1.CreateConversationRequest{Scope: m.scope()})
				if err != nil {
					return callErr("create conversation", err)
				}
				conversation = res.GetConversation().GetId()
			}
			if len(args) == 1 {
				return a.turn(ctx, conv, m, conversation, args[0], reasoning)
			}
			fmt.Fprintf(a.io.Err, "conversation %s — one message a line; /exit or Ctrl-D ends, /help explains\n", conversation)
			in := bufio.NewScanner(a.input(ctx))
			in.Buffer(make([]byte, 64<<10), 1<<20)
			for {
				fmt.Fprint(a.io.Err, "> ")
				if !in.Scan() {
					fmt.Fprintln(a.io.Err)
					return inputErr(in.Err())
				}
				line := strings.TrimSpace(in.Text())
				switch line {
				case "":
					continue
				case "/exit", "/quit":
					return nil
				case "/help", "/?":
					fmt.Fprintln(a.io.Err, "Each line is a message to the agent. /exit, /quit or Ctrl-D ends; the conversation stays (--conversation "+conversation+" continues it).")
					continue
				}
				if err := a.turn(ctx, conv, m, conversation, line, reasoning); err != nil {
					if ExitCode(err) == ExitUnavailable || ExitCode(err) == ExitInterrupted {
						return err
					}
					// A refused turn does not end the session.
					fmt.Fprintf(a.io.Err, "agentmesh: %s\n", errorText(err))
				}
			}
		}),
	}
	c.Flags().StringVarP(&conversation, "conversation", "c", "", "continue this conversation")
	c.Flags().BoolVar(&reasoning, "reasoning", false, "also print the model's reasoning (to stderr)")
	return c
}

// turn sends one message and prints its stream.
func (a *app) turn(ctx context.Context, conv orchestratorv1.ConversationServiceClient, m *mesh, id, text string, reasoning bool) error {
	stream, err := conv.StreamMessage(ctx, &orchestratorv1.StreamMessageRequest{Scope: m.scope(), ConversationId: id, Content: text})
	if err != nil {
		return callErr("send message", err)
	}
	midLine := false // the answer's last chunk did not end its line
	for {
		res, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			if midLine {
				fmt.Fprintln(a.io.Out)
			}
			return nil
		}
		if err != nil {
			if midLine {
				fmt.Fprintln(a.io.Out)
			}
			return callErr("conversation "+id, err)
		}
		if a.output != "table" {
			if err := a.emitLine(res, nil); err != nil {
				return err
			}
			if e := res.GetError(); e != nil {
				return status.Errorf(codes.Unknown, "conversation %s: %s: %s", id, e.GetCode(), e.GetMessage())
			}
			continue
		}
		switch e := res.GetEvent().(type) {
		case *orchestratorv1.StreamMessageResponse_ResponseChunk:
			fmt.Fprint(a.io.Out, e.ResponseChunk.GetContent())
			midLine = !strings.HasSuffix(e.ResponseChunk.GetContent(), "\n")
		case *orchestratorv1.StreamMessageResponse_ReasoningChunk:
			if reasoning {
				fmt.Fprint(a.io.Err, e.ReasoningChunk.GetContent())
			}
		case *orchestratorv1.StreamMessageResponse_ToolCallStart:
			fmt.Fprintf(a.io.Err, "→ %s %s\n", e.ToolCallStart.GetToolName(), clip(e.ToolCallStart.GetArgumentsJson(), 120))
		case *orchestratorv1.StreamMessageResponse_ToolCallResult:
			mark := "←"
			if e.ToolCallResult.GetIsError() {
				mark = "✗"
			}
			fmt.Fprintf(a.io.Err, "%s %s (%s) %s\n", mark, e.ToolCallResult.GetToolName(), humanPB(e.ToolCallResult.GetDuration()), clip(e.ToolCallResult.GetResult(), 120))
		case *orchestratorv1.StreamMessageResponse_StatusUpdate:
			fmt.Fprintf(a.io.Err, "· %s\n", e.StatusUpdate.GetMessage())
			for i, p := range e.StatusUpdate.GetPassages() {
				fmt.Fprintf(a.io.Err, "  [%d] %s%s · %s\n", i+1, p.GetTitle(), inParens(p.GetSourceUrl()), clip(p.GetText(), 100))
			}
		case *orchestratorv1.StreamMessageResponse_Completed:
			if midLine {
				fmt.Fprintln(a.io.Out)
				midLine = false
			}
			c := e.Completed
			fmt.Fprintf(a.io.Err, "[conversation %s · %d tokens · %s]\n", id, c.GetTotalTokens(), humanPB(c.GetDuration()))
		case *orchestratorv1.StreamMessageResponse_Error:
			if midLine {
				fmt.Fprintln(a.io.Out)
			}
			return status.Errorf(codes.Unknown, "conversation %s: %s: %s", id, e.Error.GetCode(), e.Error.GetMessage())
		}
	}
}

// inParens returns " (s)", or "" for an empty s.
func inParens(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}
