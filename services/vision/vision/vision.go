// Package vision is the vision service: two-stage image analysis next to a vision model server.
//
// Run starts it; the service binary and `agentmesh up` both call Run.
package vision

import (
	"context"
	"errors"
	"fmt"
	"strings"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	visionv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/vision/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/services/vision/internal/analysis"
	"github.com/agentmesh/agentmesh/services/vision/internal/grpcapi"
)

// Name is the service name used in logs, metrics and health.
const Name = "vision"

// Config is the service's configuration, read from the environment.
type Config struct {
	service.Common `env:""`
	// ModelGatewayAddr is the model gateway gRPC address.
	ModelGatewayAddr string `env:"MODELGATEWAY_ADDR" default:"localhost:9091" help:"model gateway gRPC address"`
	// Model is the logical model every vision call names.
	Model string `env:"VISION_MODEL" default:"vision" help:"logical model (routed by the model gateway) used for both stages; it must accept images"`
	// SmallModel is the logical model of small requests.
	SmallModel string `env:"VISION_SMALL_MODEL" default:"" help:"logical model for small requests — at most VISION_SMALL_MAX_IMAGES images to analyse, each at most VISION_SMALL_MAX_IMAGE_BYTES — in both stages (a cheaper, faster model for a screenshot or two); empty: VISION_MODEL for every request"`
	// SmallMaxImages is the most images a small request has.
	SmallMaxImages int `env:"VISION_SMALL_MAX_IMAGES" default:"2" help:"most images (those analysed, not skipped) a request may have to go to VISION_SMALL_MODEL"`
	// SmallMaxImageBytes is the largest image of a small request.
	SmallMaxImageBytes int `env:"VISION_SMALL_MAX_IMAGE_BYTES" default:"1048576" help:"largest image, in bytes, a request may have to go to VISION_SMALL_MODEL"`
	// MaxImageBytes is the largest image analysed.
	MaxImageBytes int `env:"VISION_MAX_IMAGE_BYTES" default:"10485760" help:"largest image analysed, in bytes; larger images are skipped with a reason"`
	// MaxImages is the most images one request may carry.
	MaxImages int `env:"VISION_MAX_IMAGES" default:"16" help:"most images one AnalyzeImages request may carry; more is INVALID_ARGUMENT"`
	// MaxParallel is how many model calls one request runs at once.
	MaxParallel int `env:"VISION_MAX_PARALLEL" default:"4" help:"model calls one request runs at once (one per image and stage)"`
	// MaxContextChars bounds the document text sent with each image.
	MaxContextChars int `env:"VISION_MAX_CONTEXT_CHARS" default:"4000" help:"longest document context put in a prompt, in characters; longer text is cut"`
}

// validate reports every unusable value, naming its variable.
func (c *Config) validate() error {
	var errs []error
	if strings.TrimSpace(c.ModelGatewayAddr) == "" {
		errs = append(errs, errors.New("MODELGATEWAY_ADDR must not be empty"))
	}
	if strings.TrimSpace(c.Model) == "" {
		errs = append(errs, errors.New("VISION_MODEL must not be empty"))
	}
	for _, v := range []struct {
		name string
		val  int
	}{
		{"VISION_MAX_IMAGE_BYTES", c.MaxImageBytes},
		{"VISION_MAX_IMAGES", c.MaxImages},
		{"VISION_MAX_PARALLEL", c.MaxParallel},
		{"VISION_MAX_CONTEXT_CHARS", c.MaxContextChars},
		{"VISION_SMALL_MAX_IMAGES", c.SmallMaxImages},
		{"VISION_SMALL_MAX_IMAGE_BYTES", c.SmallMaxImageBytes},
	} {
		if v.val <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %d", v.name, v.val))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("vision: invalid configuration: %w", err)
	}
	return nil
}

// Run serves the service on rt.Listener until ctx is done, then shuts down
// gracefully. It returns at once, naming the variable, when the
// configuration is unusable. The model gateway is a soft dependency: while
// it is down, calls fail with UNAVAILABLE.
func Run(ctx context.Context, cfg *Config, rt service.Runtime) error {
	if err := cfg.validate(); err != nil {
		if rt.Listener != nil {
			_ = rt.Listener.Close() // Run owns the listener
		}
		return err
	}
	modelGateway, err := service.DialPeer(cfg.ModelGatewayAddr)
	if err != nil {
		if rt.Listener != nil {
			_ = rt.Listener.Close()
		}
		return err
	}
	defer modelGateway.Close()
	analyzer, err := analysis.New(modelv1.NewModelServiceClient(modelGateway), analysis.Options{
		Model:          strings.TrimSpace(cfg.Model),
		SmallModel:     strings.TrimSpace(cfg.SmallModel),
		SmallMaxImages: cfg.SmallMaxImages, SmallMaxImageBytes: cfg.SmallMaxImageBytes,
		MaxImageBytes:   cfg.MaxImageBytes,
		MaxImages:       cfg.MaxImages,
		MaxParallel:     cfg.MaxParallel,
		MaxContextChars: cfg.MaxContextChars,
	})
	if err != nil {
		if rt.Listener != nil {
			_ = rt.Listener.Close()
		}
		return err
	}

	srv := grpcx.NewServer(rt.Server, rt.Logger)
	visionv1.RegisterVisionServiceServer(srv.GRPC(), grpcapi.New(analyzer, rt.Logger))
	if rt.Ready != nil {
		rt.Ready()
	}
	return srv.Serve(ctx, rt.Listener)
}
