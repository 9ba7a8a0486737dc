package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// serverChild is a benchmark server started as a child process of this
// binary by the -local modes. It is ended only by its own PID.
type serverChild struct {
	cmd    *exec.Cmd
	ready  chan string // the child's first line of output
	exited chan error  // its exit status, once its output ended
}

// childEnv is added to the environment of server children (the link's
// configuration of the other end, see localLink).
var childEnv []string

// startServerChild runs this executable with args. The first line the
// child prints is delivered by firstLine; the rest is copied to rest (with
// a "server: " prefix) and its stderr to stderr.
func startServerChild(args []string, rest, stderr io.Writer) (*serverChild, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable: %w", err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), childEnv...)
	cmd.Stderr = stderr
	cmd.SysProcAttr = childSysProcAttr()
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	c := &serverChild{cmd: cmd, ready: make(chan string, 1), exited: make(chan error, 1)}
	// The child's output is read to its end, then the child reaped, in
	// one goroutine.
	go func() {
		r := bufio.NewReader(pipe)
		line, _ := r.ReadString('\n')
		c.ready <- strings.TrimSpace(line)
		if rest == nil {
			rest = io.Discard
		}
		io.Copy(rest, r)
		c.exited <- cmd.Wait()
	}()
	return c, nil
}

// firstLine waits for the child's first line of output.
func (c *serverChild) firstLine(ctx context.Context, timeout time.Duration) (string, error) {
	select {
	case line := <-c.ready:
		return line, nil
	case <-time.After(timeout):
		return "", fmt.Errorf("server child did not start listening within %v", timeout)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// finish ends the child: at once (kill) when the run failed with err,
// otherwise by waiting up to 5 s for it to exit on its own. It returns the
// run's error, or the child's.
func (c *serverChild) finish(err error) error {
	if err != nil {
		c.cmd.Process.Kill() // by its PID only
		<-c.exited
		return err
	}
	select {
	case werr := <-c.exited:
		if werr != nil {
			return fmt.Errorf("server child: %w", werr)
		}
		return nil
	case <-time.After(5 * time.Second):
		c.cmd.Process.Kill()
		<-c.exited
		return errors.New("server child did not exit after the session; killed it")
	}
}

// pid is the child's process id.
func (c *serverChild) pid() int { return c.cmd.Process.Pid }
