package emulator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"time"
)

const (
	// startAttempts bounds retries of the rare race where another process
	// takes the port between our probe and the emulator's bind.
	startAttempts = 3
	logTailBytes  = 4 << 10
)

// Start runs a private emulator so a test binary needs nothing but the
// emulator installed; the process is tied to this one (it is SIGKILLed if we
// die, even on a crash or test timeout), and ctx bounds only the start-up.
func Start(ctx context.Context, opts Options) (*Emulator, error) {
	bin := opts.Binary
	if bin == "" {
		var err error
		if bin, err = Binary(); err != nil {
			return nil, err
		}
	}
	if err := setProcessEnv(); err != nil {
		return nil, err
	}

	var lastErr error
	for range startAttempts {
		e, retry, err := startOnce(ctx, bin, opts)
		if err == nil {
			return e, nil
		}
		lastErr = err
		if !retry || ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

// startOnce starts the binary on a fresh port; retry reports whether the
// failure may have been a lost race for that port.
func startOnce(ctx context.Context, bin string, opts Options) (e *Emulator, retry bool, err error) {
	port, err := freePort()
	if err != nil {
		return nil, false, err
	}
	host := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))

	args := []string{"--host_port", host}
	if opts.FaultInjection {
		args = append(args, "--enable_fault_injection")
	}
	logs := newLogTail(logTailBytes)
	var out io.Writer = logs
	if opts.Log != nil {
		out = io.MultiWriter(opts.Log, logs)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()

	e = &Emulator{host: host, cmd: cmd, exited: make(chan struct{}), logs: logs}
	if err := cmd.Start(); err != nil {
		return nil, false, fmt.Errorf("starting Spanner emulator %s: %w; check SPANNER_EMULATOR_BIN or the gcloud SDK install", bin, err)
	}
	go func() {
		e.waitErr = cmd.Wait()
		close(e.exited)
	}()

	if err := e.waitListening(ctx); err != nil {
		_ = e.Stop()
		var exited exitedError
		return nil, errors.As(err, &exited), fmt.Errorf("starting Spanner emulator %s on %s: %w%s", bin, host, err, e.tail())
	}
	if err := e.connect(ctx); err != nil {
		_ = e.Stop()
		return nil, false, fmt.Errorf("%w%s", err, e.tail())
	}
	return e, false, nil
}

// freePort asks the kernel for an unused port; the emulator binds it a few
// milliseconds later (Start retries if someone else got there first).
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port for the Spanner emulator: %w", err)
	}
	addr, ok := l.Addr().(*net.TCPAddr)
	if err := l.Close(); err != nil || !ok {
		return 0, fmt.Errorf("finding a free port for the Spanner emulator: listener on %s: %v", l.Addr(), err)
	}
	return addr.Port, nil
}

type exitedError struct{ err error }

func (e exitedError) Error() string {
	if e.err == nil {
		return "emulator exited before listening"
	}
	return "emulator exited before listening: " + e.err.Error()
}

// waitListening polls the port because the emulator offers no readiness
// signal; it usually accepts connections within ~50 ms.
func (e *Emulator) waitListening(ctx context.Context) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var d net.Dialer
	for {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := d.DialContext(dctx, "tcp", e.host)
		cancel()
		if err == nil {
			_ = conn.Close()
			return nil
		}
		select {
		case <-e.exited:
			return exitedError{e.waitErr}
		case <-ctx.Done():
			return fmt.Errorf("waiting for it to listen: %w (last dial error: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}
