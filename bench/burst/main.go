// Command burst opens N TCP connections to a Kafka listener at the same instant, sends one
// ApiVersions v0 request on each and waits for every answer. It is the client of
// bench/accept_burst_bench.py: a single-process Python asyncio client needs ~0.3 s for 1,000
// connections on its own, too slow to measure a 0.2 s target.
//
//	burst -addr 127.0.0.1:9092 -clients 1000 -timeout 10s
//
// Prints one JSON line {"clients","ok","failed","seconds","first_error"}; seconds is from the
// release of the barrier (all goroutines start dialing) to the last answer. Exit status 1 if any
// connection failed. -v adds, on stderr, when connections were established and answered
// (percentiles from the release): where a slow burst spends its time.
package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"
)

// frame is an ApiVersions v0 request: api key 18, version 0, correlation id 1, client id "burst",
// preceded by its int32 length (the same bytes as the Python client).
var frame = func() []byte {
	body := binary.BigEndian.AppendUint16(nil, 18)
	body = binary.BigEndian.AppendUint16(body, 0)
	body = binary.BigEndian.AppendUint32(body, 1)
	body = binary.BigEndian.AppendUint16(body, 5)
	body = append(body, "burst"...)
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}()

type result struct {
	Clients    int     `json:"clients"`
	OK         int     `json:"ok"`
	Failed     int     `json:"failed"`
	Seconds    float64 `json:"seconds"`
	FirstError string  `json:"first_error"`
}

// one dials addr, sends the request and checks the answer; deadline bounds the whole exchange.
// connected is set when the TCP handshake completed.
func one(addr string, deadline time.Time, connected *time.Time) error {
	d := net.Dialer{Deadline: deadline}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return err
	}
	*connected = time.Now()
	defer c.Close()
	if err := c.SetDeadline(deadline); err != nil {
		return err
	}
	if _, err := c.Write(frame); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		return fmt.Errorf("read size: %w", err)
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 6 || n > 1<<20 {
		return fmt.Errorf("bad response size %d", n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c, body); err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	if id := int32(binary.BigEndian.Uint32(body[0:4])); id != 1 {
		return fmt.Errorf("correlation id %d, want 1", id)
	}
	if code := int16(binary.BigEndian.Uint16(body[4:6])); code != 0 {
		return fmt.Errorf("error code %d", code)
	}
	return nil
}

func raiseNofile() {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return
	}
	l.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		fmt.Fprintln(os.Stderr, "burst: cannot raise RLIMIT_NOFILE:", err)
	}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:9092", "host:port of the Kafka listener")
	clients := flag.Int("clients", 1000, "number of simultaneous connections")
	timeout := flag.Duration("timeout", 10*time.Second, "per-connection limit from the release, dial to answer")
	verbose := flag.Bool("v", false, "print connect and answer time percentiles to stderr")
	flag.Parse()
	if *clients < 1 {
		fmt.Fprintln(os.Stderr, "burst: -clients must be at least 1")
		os.Exit(2)
	}
	raiseNofile()

	var (
		ready, done    sync.WaitGroup
		mu             sync.Mutex
		res            = result{Clients: *clients}
		last           time.Duration
		dials, answers []time.Duration
	)
	start := make(chan struct{})
	var release time.Time // written before close(start), read after it: ordered by the channel
	ready.Add(*clients)
	done.Add(*clients)
	for range *clients {
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			var connected time.Time
			err := one(*addr, release.Add(*timeout), &connected)
			took := time.Since(release)
			mu.Lock()
			defer mu.Unlock()
			if !connected.IsZero() {
				dials = append(dials, connected.Sub(release))
			}
			if err != nil {
				res.Failed++
				if res.FirstError == "" {
					res.FirstError = err.Error()
				}
				return
			}
			res.OK++
			last = max(last, took)
			answers = append(answers, took)
		}()
	}
	ready.Wait()
	time.Sleep(50 * time.Millisecond) // let every goroutine park on the barrier
	release = time.Now()
	close(start)
	done.Wait()
	if res.Failed > 0 {
		last = time.Since(release) // failures count: the burst is not answered until they give up
	}
	res.Seconds = last.Seconds()
	if *verbose {
		fmt.Fprintf(os.Stderr, "connected %s\nanswered  %s\n", percentiles(dials), percentiles(answers))
	}
	out, err := json.Marshal(res)
	if err != nil {
		fmt.Fprintln(os.Stderr, "burst:", err)
		os.Exit(2)
	}
	fmt.Println(string(out))
	if res.Failed > 0 {
		os.Exit(1)
	}
}

// percentiles formats n, p50, p90, p99 and max of ds in milliseconds.
func percentiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "n=0"
	}
	slices.Sort(ds)
	at := func(q float64) float64 { return float64(ds[int(q*float64(len(ds)-1))].Microseconds()) / 1000 }
	return fmt.Sprintf("n=%d p50=%.1fms p90=%.1fms p99=%.1fms max=%.1fms", len(ds), at(0.5), at(0.9), at(0.99), at(1))
}
