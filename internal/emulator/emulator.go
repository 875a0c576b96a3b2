package emulator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"

	database "cloud.google.com/go/spanner/admin/database/apiv1"
	instance "cloud.google.com/go/spanner/admin/instance/apiv1"
	"cloud.google.com/go/spanner/admin/instance/apiv1/instancepb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

const (
	projectID  = "spannerlock-test"
	instanceID = "spannerlock-test"
)

// Options configures Start; the zero value is what tests want.
type Options struct {
	// Binary is the emulator_main to run; empty means Binary().
	Binary string
	// FaultInjection passes --enable_fault_injection, making the emulator
	// abort commits at random so retry paths get exercised.
	FaultInjection bool
	// Log receives the emulator's stdout and stderr; nil discards them (the
	// tail is still kept and quoted if the start fails).
	Log io.Writer
}

// Emulator is a running emulator: one this process started, or an external
// one named by SPANNER_EMULATOR_HOST. It owns one instance in which callers
// create throwaway databases, so tests never share schema or rows.
type Emulator struct {
	host     string
	instance string

	cmd     *exec.Cmd     // nil for an external emulator
	exited  chan struct{} // closed once cmd has been waited for
	waitErr error         // cmd.Wait's result, valid after exited is closed
	logs    *logTail

	dbAdmin   *database.DatabaseAdminClient
	instAdmin *instance.InstanceAdminClient

	stopOnce sync.Once
	stopErr  error
}

// External adopts an emulator someone else runs (SPANNER_EMULATOR_HOST), so
// tests can share a long-lived one; the instance is created or reused, and
// Stop leaves the emulator running.
func External(ctx context.Context, host string) (*Emulator, error) {
	if err := setProcessEnv(); err != nil {
		return nil, err
	}
	for _, scheme := range []string{"http://", "https://", "passthrough:///"} {
		host = strings.TrimPrefix(host, scheme)
	}
	e := &Emulator{host: host}
	if err := e.connect(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// setProcessEnv turns multiplexed sessions off for every spanner client in
// this process: the emulator does not support them and the Go client reads
// this setting only from the environment.
func setProcessEnv() error {
	if err := os.Setenv("GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS", "false"); err != nil {
		return fmt.Errorf("disabling multiplexed sessions for the Spanner emulator: %w", err)
	}
	return nil
}

// adminOptions point clients at this emulator explicitly, so they work even
// when SPANNER_EMULATOR_HOST names a different one.
func (e *Emulator) adminOptions() []option.ClientOption {
	return []option.ClientOption{
		option.WithEndpoint("passthrough:///" + e.host),
		option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
	}
}

// connect creates the admin clients and the instance every database lives in.
func (e *Emulator) connect(ctx context.Context) error {
	e.instance = "projects/" + projectID + "/instances/" + instanceID
	var err error
	if e.instAdmin, err = instance.NewInstanceAdminClient(ctx, e.adminOptions()...); err != nil {
		return fmt.Errorf("creating instance admin client for Spanner emulator %s: %w", e.host, err)
	}
	if e.dbAdmin, err = database.NewDatabaseAdminClient(ctx, e.adminOptions()...); err != nil {
		_ = e.closeClients()
		return fmt.Errorf("creating database admin client for Spanner emulator %s: %w", e.host, err)
	}
	if err := e.createInstance(ctx); err != nil {
		_ = e.closeClients()
		return err
	}
	return nil
}

func (e *Emulator) createInstance(ctx context.Context) error {
	op, err := e.instAdmin.CreateInstance(ctx, &instancepb.CreateInstanceRequest{
		Parent:     "projects/" + projectID,
		InstanceId: instanceID,
		Instance: &instancepb.Instance{
			Config:      "projects/" + projectID + "/instanceConfigs/emulator-config",
			DisplayName: "spannerlock tests",
			NodeCount:   1,
		},
	})
	if err == nil {
		_, err = op.Wait(ctx)
	}
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return fmt.Errorf("creating instance %s on Spanner emulator %s: %w; is an emulator listening there?", e.instance, e.host, err)
	}
	return nil
}

// Host is what SPANNER_EMULATOR_HOST must be set to for this emulator.
func (e *Emulator) Host() string { return e.host }

// Project is the project ID every resource on this emulator lives under.
func (e *Emulator) Project() string { return projectID }

// Instance is the full path of the instance CreateDatabase uses, for callers
// that build database paths themselves.
func (e *Emulator) Instance() string { return e.instance }

// Env is what a child process (the demo, a terraform run) needs in its
// environment to reach this emulator with a stock spanner client.
func (e *Emulator) Env() []string {
	return []string{
		"SPANNER_EMULATOR_HOST=" + e.host,
		"GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS=false",
	}
}

// Stop releases the emulator so nothing outlives its user: it closes the admin
// clients and kills the process group Start created (an external emulator is
// left running). Close every spanner.Client first; a client whose emulator is
// gone retries for a minute. Calling Stop again returns the first result.
func (e *Emulator) Stop() error {
	e.stopOnce.Do(func() {
		e.stopErr = e.closeClients()
		if e.cmd == nil {
			return
		}
		killGroup(e.cmd)
		<-e.exited
	})
	return e.stopErr
}

func (e *Emulator) closeClients() error {
	var errs []error
	if e.dbAdmin != nil {
		errs = append(errs, e.dbAdmin.Close())
		e.dbAdmin = nil
	}
	if e.instAdmin != nil {
		errs = append(errs, e.instAdmin.Close())
		e.instAdmin = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("closing Spanner emulator admin clients: %w", err)
	}
	return nil
}

// tail formats the emulator's last output for an error message.
func (e *Emulator) tail() string {
	if e.logs == nil {
		return ""
	}
	s := strings.TrimSpace(e.logs.String())
	if s == "" {
		return " (emulator printed nothing)"
	}
	return "\nemulator output (tail):\n" + s
}
