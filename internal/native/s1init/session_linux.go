package s1init

import (
	"encoding/json"
	"errors"
	"os"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// runSession is init of a live sandbox: it starts each program the host
// asks for, confined as the spec says, reports when each ends, and reaps
// whatever else ends (a background process whose parent has gone), until
// the host ends the sandbox (EndSignal, or its end of the socket
// closed). Then, as for a run: every process ends, quota'd writes are
// committed, the status goes on fd 4.
func runSession(sp *Spec, xc *execCtl, sigs chan os.Signal, report func(Status)) int {
	// A run's init never collects (GOGC=off: it lives for one program);
	// a live sandbox's lives for many, within the sandbox's memory.
	debug.SetGCPercent(100)
	sock := SessionFD
	var (
		sendMu sync.Mutex
		mu     sync.Mutex
		execs  = map[int]uint64{} // pid → exec id
		kick   = make(chan struct{}, 1)
		end    = make(chan struct{})
		once   sync.Once
	)
	stop := func() { once.Do(func() { close(end) }) }
	// The next exec's launcher (launch_linux.go), started while the
	// sandbox waits for its first exec, and again once an exec's program
	// has ended or has run for refillAfter, whichever comes first: not
	// beside a short program's own start, whose CPU it would take.
	var next nextLauncher
	next.start(&sp.Exec)
	refill := func() { next.start(&sp.Exec) }
	send := func(m SessionMsg) {
		b, _ := json.Marshal(m)
		sendMu.Lock()
		unix.Sendmsg(sock, b, nil, nil, 0)
		sendMu.Unlock()
	}
	go func() {
		for s := range sigs {
			if s == EndSignal {
				stop()
			}
		}
	}()
	// The reaper: exits of execs are reported; the rest only reaped.
	go func() {
		for {
			var ws unix.WaitStatus
			wpid, err := unix.Wait4(-1, &ws, 0, nil)
			switch {
			case err == unix.EINTR:
				continue
			case err == unix.ECHILD:
				select {
				case <-kick:
					continue
				case <-end:
					return
				}
			case err != nil:
				stop()
				return
			}
			mu.Lock()
			id, ok := execs[wpid]
			delete(execs, wpid)
			mu.Unlock()
			if !ok {
				continue
			}
			m := SessionMsg{Op: "exited", ID: id}
			if ws.Signaled() {
				m.Signal = int(ws.Signal())
			} else {
				m.Exited, m.Code = true, ws.ExitStatus()
			}
			send(m)
			refill()
		}
	}()
	go func() {
		defer stop()
		buf := make([]byte, 1<<20)
		oob := make([]byte, unix.CmsgSpace(16*4))
		for {
			n, oobn, _, _, err := unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
			if err == unix.EINTR {
				continue
			}
			if err != nil || n == 0 {
				return // the host is gone: the sandbox ends
			}
			fds := ReceivedFDs(oob[:oobn])
			var m SessionMsg
			if err := json.Unmarshal(buf[:n], &m); err != nil {
				CloseFDs(fds)
				return
			}
			switch m.Op {
			case "exec":
				if len(fds) < 3 {
					CloseFDs(fds)
					send(SessionMsg{Op: "failed", ID: m.ID, Error: "init: an exec needs its three standard streams"})
					continue
				}
				ex := sp.Exec
				ex.Path, ex.Args, ex.Env, ex.Dir = m.Path, m.Args, m.Env, m.Dir
				if ex.Dir == "" {
					ex.Dir = "/tmp"
				}
				files := []uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2])}
				// Under the lock until "started" is sent: the reaper, which
				// takes it to find whose exit it reaped, reports the exit
				// after the start.
				nl := next.take() // before the lock: it may still be starting
				mu.Lock()
				pid, err := startConfined(&ex, xc, files, fds[3:], nl)
				if err == nil {
					execs[pid] = m.ID
					send(SessionMsg{Op: "started", ID: m.ID, Pid: pid})
				}
				mu.Unlock()
				CloseFDs(fds)
				if err != nil {
					refill()
					r := SessionMsg{Op: "failed", ID: m.ID, Error: "init: " + err.Error()}
					var xe execError
					if errors.As(err, &xe) {
						r.Errno = int(xe.errno)
					}
					send(r)
					continue
				}
				time.AfterFunc(refillAfter, refill)
				select {
				case kick <- struct{}{}:
				default:
				}
			case "kill":
				mu.Lock()
				for pid, id := range execs {
					if id == m.ID && m.Signal > 0 {
						unix.Kill(-pid, syscall.Signal(m.Signal))
					}
				}
				mu.Unlock()
			default:
				CloseFDs(fds)
			}
		}
	}()
	<-end
	// The sandbox is done: nothing in it outlives it, and no launcher
	// is started after this.
	next.close()
	unix.Kill(-1, unix.SIGKILL)
	mu.Lock() // no exec starts after this
	for {
		// Again each time: an exec that was starting as the kill came
		// (it held the lock) may have made a process since.
		unix.Kill(-1, unix.SIGKILL)
		if _, err := unix.Wait4(-1, nil, 0, nil); err == unix.ECHILD {
			break
		}
	}
	st := Status{Started: true, Exited: true}
	st.Commits = commitOverlays(sp)
	report(st)
	return 0
}

// refillAfter is how long an exec's program runs before its sandbox's
// init starts the launcher for the next exec, if the program has not
// ended by then (when it is started).
const refillAfter = 20 * time.Millisecond

// ReceivedFDs are the descriptors an SCM_RIGHTS message carried.
func ReceivedFDs(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if r, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, r...)
		}
	}
	return fds
}

// CloseFDs closes each descriptor.
func CloseFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
