package locality

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/key"
)

// roleEnv makes the test binary play a part in another process instead of
// running the tests: an anchor, a delaying relay, or a host.
const roleEnv = "LOCALITY_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "":
		os.Exit(m.Run())
	case "anchor":
		die(runAnchor())
	case "relay":
		die(runRelay())
	case "host":
		die(runHost())
	default:
		die(fmt.Errorf("unknown role %q", os.Getenv(roleEnv)))
	}
}

func die(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func envKey(name string) (key.Private, error) {
	b, err := hex.DecodeString(os.Getenv(name))
	if err != nil {
		return key.Private{}, fmt.Errorf("%s: %w", name, err)
	}
	return key.FromSeed(b)
}

// runAnchor serves an anchor on LOCALITY_LISTEN until it is killed.
func runAnchor() error {
	k, err := envKey("LOCALITY_SEED")
	if err != nil {
		return err
	}
	lat, _ := strconv.ParseInt(os.Getenv("LOCALITY_LAT"), 10, 64)
	lon, _ := strconv.ParseInt(os.Getenv("LOCALITY_LON"), 10, 64)
	a, err := NewAnchor(k, Position{Lat: lat, Lon: lon})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", os.Getenv("LOCALITY_LISTEN"))
	if err != nil {
		return err
	}
	fmt.Println("ready")
	return (&http.Server{Handler: a, ReadHeaderTimeout: 5 * time.Second}).Serve(l)
}

// runRelay forwards TCP from LOCALITY_LISTEN to LOCALITY_TARGET, holding
// every byte that flows back from the target for LOCALITY_DELAY: a delay
// line in user space where the kernel has no netem.
func runRelay() error {
	delay, err := time.ParseDuration(os.Getenv("LOCALITY_DELAY"))
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", os.Getenv("LOCALITY_LISTEN"))
	if err != nil {
		return err
	}
	fmt.Println("ready")
	for {
		in, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer in.Close()
			out, err := net.Dial("tcp", os.Getenv("LOCALITY_TARGET"))
			if err != nil {
				return
			}
			defer out.Close()
			go io.Copy(out, in)
			delayLine(in, out, delay)
		}()
	}
}

// delayLine copies from src to dst, each chunk written delay after it
// was read, in order.
func delayLine(dst io.Writer, src io.Reader, delay time.Duration) {
	type chunk struct {
		due time.Time
		b   []byte
	}
	q := make(chan chunk, 1024)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for c := range q {
			time.Sleep(time.Until(c.due))
			if _, err := dst.Write(c.b); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			q <- chunk{due: time.Now().Add(delay), b: append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			break
		}
	}
	close(q)
	wg.Wait()
}

// runHost measures one round trip to LOCALITY_URL and prints the
// measurement as JSON.
func runHost() error {
	k, err := envKey("LOCALITY_SEED")
	if err != nil {
		return err
	}
	b, err := addr.Parse(os.Getenv("LOCALITY_BINDING"))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := Measure(ctx, os.Getenv("LOCALITY_URL"), k, b)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(m)
}

// awaitReady reads the first line a helper prints and wants "ready".
func awaitReady(r io.Reader) error {
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		return fmt.Errorf("the helper ended before it was ready: %w", err)
	}
	if line != "ready\n" {
		return fmt.Errorf("the helper said %q", line)
	}
	return nil
}
