package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Port names the socket (.s.PGSQL.PORT) in the private directory.
const Port = 5432

// Server is a running PostgreSQL.
type Server struct {
	Dir string // its temporary directory: data/ and the socket
	Bin string // the directory of initdb and postgres
	// Listen is the address it also takes TCP connections on ("":
	// none), from the network Allow names (CIDR), without a password.
	Listen, Allow string
	cred          *syscall.Credential
	cmd           *exec.Cmd
	exited        chan struct{}
	dbs           atomic.Int64
}

// BinDir finds the newest installed PostgreSQL's programs.
func BinDir() (string, error) {
	ms, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(ms, func(i, j int) bool { return version(ms[i]) > version(ms[j]) })
	if len(ms) == 0 {
		return "", errors.New("no PostgreSQL installed (/usr/lib/postgresql/N/bin/initdb; Debian: apt-get install postgresql, which scripts/deps does)")
	}
	return filepath.Dir(ms[0]), nil
}

func version(initdb string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return n
}

// Start initialises and starts a server; Stop ends it and removes its
// directory.
func Start() (*Server, error) { return StartOn("", "") }

// StartOn is Start with a TCP listener on address listen too, taking
// connections from the network allow (a CIDR): hosts in other network
// namespaces reach it there (DSNOn).
func StartOn(listen, allow string) (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sandbox-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, Bin: bin, Listen: listen, Allow: allow}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("initdb refuses root, and there is no postgres user to run it as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	initdb := s.command("initdb", "-D", s.data(), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync", "--no-instructions")
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	if allow != "" {
		hba, err := os.OpenFile(filepath.Join(s.data(), "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
		if err == nil {
			_, err = fmt.Fprintf(hba, "host all all %s trust\n", allow)
			hba.Close()
		}
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pg_hba.conf: %w", err)
		}
	}
	if err := s.start(); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

func (s *Server) data() string { return filepath.Join(s.Dir, "data") }

func (s *Server) command(prog string, args ...string) *exec.Cmd {
	c := exec.Command(filepath.Join(s.Bin, prog), args...)
	c.Dir = s.Dir
	c.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	c.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Setpgid: true}
	return c
}

func (s *Server) start() error {
	log, err := os.OpenFile(filepath.Join(s.Dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	s.cmd = s.command("postgres", "-D", s.data(), "-k", s.Dir, "-p", strconv.Itoa(Port),
		"-c", "listen_addresses="+s.Listen, "-c", "max_connections=200", "-c", "shared_buffers=32MB")
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	s.exited = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { c.Wait(); close(done) }(s.cmd, s.exited)
	// Ready when it answers: a bound, not a measure.
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c, err := pgx.Connect(ctx, s.DSN("postgres"))
		cancel()
		if err == nil {
			c.Close(context.Background())
			return nil
		}
		select {
		case <-s.exited:
			b, _ := os.ReadFile(filepath.Join(s.Dir, "server.log"))
			return fmt.Errorf("postgres exited before it answered: %s", b)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not answer within 60 s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// DSN is the connection string of database db.
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=%s sslmode=disable", s.Dir, Port, db)
}

// DSNOn is the connection string of database db over TCP (StartOn).
func (s *Server) DSNOn(db string) string {
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=%s sslmode=disable connect_timeout=5", s.Listen, Port, db)
}

// NewDatabase makes a database of its own for t and returns its DSN.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), s.dbs.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	return s.DSN(name)
}

// Restart stops the server (fast shutdown: connections are cut) and
// starts it again on the same data.
func (s *Server) Restart() error {
	s.Down()
	return s.Up()
}

// Down stops the server (fast shutdown: connections are cut), its data
// kept for Up.
func (s *Server) Down() { s.halt(syscall.SIGINT) }

// Up starts the server Down stopped, on the same data, and returns once
// it answers.
func (s *Server) Up() error { return s.start() }

func (s *Server) halt(sig syscall.Signal) {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Signal(sig)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
	}
	s.cmd = nil
}

// Stop ends the server and removes its directory.
func (s *Server) Stop() {
	s.halt(syscall.SIGINT)
	os.RemoveAll(s.Dir)
}
