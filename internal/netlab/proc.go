package netlab

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is a process a Lab started in one of its namespaces. Its standard
// output is delivered line by line (Lines); its standard error is kept
// (Stderr). The lab ends it, by its PID, in Close if it still runs.
type Proc struct {
	lab  *Lab
	name string
	cmd  *exec.Cmd

	lines   chan string   // stdout lines; closed at the end of stdout
	abandon chan struct{} // closed by Kill: stop delivering lines
	done    chan struct{} // closed once the process is reaped
	err     error         // its exit status, once done is closed

	killOnce sync.Once
	stderr   lockedBuffer
}

// lockedBuffer is a bytes.Buffer safe for one writer and other readers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Start runs prog with args inside ns, as a process the lab ends in Close.
func (l *Lab) Start(ns *Namespace, prog string, args ...string) (*Proc, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, errors.New("netlab: the lab is closed")
	}
	p := &Proc{
		lab:     l,
		name:    fmt.Sprintf("%s in %s", strings.Join(append([]string{prog}, args...), " "), ns.Name),
		cmd:     exec.Command("ip", append([]string{"netns", "exec", ns.Name, prog}, args...)...),
		lines:   make(chan string, 1024),
		abandon: make(chan struct{}),
		done:    make(chan struct{}),
	}
	p.cmd.Stderr = &p.stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("netlab: start %s: %w", p.name, err)
	}
	l.procs[p] = true
	go p.read(bufio.NewReader(out))
	return p, nil
}

// read delivers the output lines, then reaps the process.
func (p *Proc) read(r *bufio.Reader) {
	defer close(p.done)
	for {
		line, err := r.ReadString('\n')
		if line = strings.TrimRight(line, "\r\n"); line != "" {
			select {
			case p.lines <- line:
			case <-p.abandon:
			}
		}
		if err != nil {
			break
		}
	}
	close(p.lines)
	p.err = p.cmd.Wait()
	p.lab.mu.Lock()
	delete(p.lab.procs, p)
	p.lab.mu.Unlock()
}

// String names the process: its command line and namespace.
func (p *Proc) String() string { return p.name }

// PID is the process's ID.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Lines delivers the process's standard output, a line at a time without
// the newline; it is closed at the end of the output.
func (p *Proc) Lines() <-chan string { return p.lines }

// Done is closed once the process has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the process's exit status (nil for 0); valid once Done is
// closed.
func (p *Proc) Err() error {
	<-p.done
	return p.err
}

// Stderr is what the process has written to its standard error so far.
func (p *Proc) Stderr() string { return p.stderr.String() }

// Signal sends sig to the process by its PID, unless it has been reaped.
func (p *Proc) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	return p.cmd.Process.Signal(sig)
}

// Stop asks the process to end (SIGTERM), and kills it (SIGKILL) if it
// has not ended after grace. It returns its exit status.
func (p *Proc) Stop(grace time.Duration) error {
	p.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.Kill()
	}
	return p.Err()
}

// Kill ends the process by SIGKILL to its PID, stops delivering its
// output, and waits until it is reaped.
func (p *Proc) Kill() {
	p.killOnce.Do(func() { close(p.abandon) })
	p.Signal(syscall.SIGKILL)
	<-p.done
}
