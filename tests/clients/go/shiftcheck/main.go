// What a franz-go client sees of a shifted mirror partition (docs/mirroring.md "Shifted
// prefixes"); run by tests/integration/test_mirror_offset_shift_clients.py against the source and
// through the proxy, the outputs compared:
//
//	shift-check consume <bootstrap> <topic> <partitions> <read_committed|read_uncommitted> <expected records>
//	    every partition from its start: "R <p> <offset> <timestamp ms> <key hex|-|_> <value hex|-|_> <headers>"
//	    per record until <expected> arrived (or 60 s), then 1.5 s more (anything then is an extra record).
//	shift-check offsets <bootstrap> <topic> <ts,ts,...>
//	    kadm: "B <p> <start offset>", "E <p> <end offset>", "T <p> <ts> <first offset at or after ts>".
//	shift-check commit <bootstrap> <group> <topic> <p:offset,...>
//	    kadm CommitOffsets then FetchOffsets: "C <p> <committed offset>".
package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func show(b []byte) string {
	if b == nil {
		return "-"
	}
	if len(b) == 0 {
		return "_"
	}
	return hex.EncodeToString(b)
}

func fail(what string, err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
	os.Exit(1)
}

func printListed(tag string, suffix string, l kadm.ListedOffsets, topic string) {
	var lines []string
	for p, o := range l[topic] {
		if o.Err != nil {
			fail(fmt.Sprintf("%s partition %d", tag, p), o.Err)
		}
		lines = append(lines, fmt.Sprintf("%s %d%s %d", tag, p, suffix, o.Offset))
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
}

func main() {
	mode, bootstrap := os.Args[1], os.Args[2]
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	switch mode {
	case "consume":
		topic := os.Args[3]
		partitions, _ := strconv.Atoi(os.Args[4])
		level := kgo.ReadUncommitted()
		if os.Args[5] == "read_committed" {
			level = kgo.ReadCommitted()
		}
		expected, _ := strconv.Atoi(os.Args[6])
		offsets := map[int32]kgo.Offset{}
		for p := 0; p < partitions; p++ {
			offsets[int32(p)] = kgo.NewOffset().AtStart()
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.FetchIsolationLevel(level),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}))
		if err != nil {
			fail("client", err)
		}
		defer cl.Close()
		seen := 0
		var quiet time.Time
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
			if seen >= expected {
				if quiet.IsZero() {
					quiet = time.Now().Add(1500 * time.Millisecond)
				} else if time.Now().After(quiet) {
					break
				}
			}
			pctx, pcancel := context.WithTimeout(ctx, 300*time.Millisecond)
			fs := cl.PollFetches(pctx)
			pcancel()
			fs.EachError(func(t string, p int32, err error) {
				if err != context.DeadlineExceeded && err != context.Canceled {
					fmt.Fprintf(os.Stderr, "fetch error %s-%d: %v\n", t, p, err)
				}
			})
			fs.EachRecord(func(r *kgo.Record) {
				seen++
				fmt.Printf("R %d %d %d %s %s %d\n", r.Partition, r.Offset, r.Timestamp.UnixMilli(), show(r.Key), show(r.Value), len(r.Headers))
			})
		}
	case "offsets":
		topic := os.Args[3]
		cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap))
		if err != nil {
			fail("client", err)
		}
		defer cl.Close()
		adm := kadm.NewClient(cl)
		start, err := adm.ListStartOffsets(ctx, topic)
		if err != nil {
			fail("ListStartOffsets", err)
		}
		printListed("B", "", start, topic)
		end, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			fail("ListEndOffsets", err)
		}
		printListed("E", "", end, topic)
		for _, s := range strings.Split(os.Args[4], ",") {
			ts, _ := strconv.ParseInt(s, 10, 64)
			at, err := adm.ListOffsetsAfterMilli(ctx, ts, topic)
			if err != nil {
				fail("ListOffsetsAfterMilli", err)
			}
			printListed("T", " "+s, at, topic)
		}
	case "commit":
		group, topic := os.Args[3], os.Args[4]
		cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap))
		if err != nil {
			fail("client", err)
		}
		defer cl.Close()
		adm := kadm.NewClient(cl)
		var os_ kadm.Offsets = kadm.Offsets{}
		for _, spec := range strings.Split(os.Args[5], ",") {
			f := strings.Split(spec, ":")
			p, _ := strconv.Atoi(f[0])
			at, _ := strconv.ParseInt(f[1], 10, 64)
			os_.Add(kadm.Offset{Topic: topic, Partition: int32(p), At: at, LeaderEpoch: -1})
		}
		rs, err := adm.CommitOffsets(ctx, group, os_)
		if err == nil {
			err = rs.Error()
		}
		if err != nil {
			fail("CommitOffsets", err)
		}
		back, err := adm.FetchOffsets(ctx, group)
		if err == nil {
			err = back.Error()
		}
		if err != nil {
			fail("FetchOffsets", err)
		}
		var lines []string
		for p, o := range back[topic] {
			lines = append(lines, fmt.Sprintf("C %d %d", p, o.At))
		}
		sort.Strings(lines)
		for _, l := range lines {
			fmt.Println(l)
		}
	default:
		fail("mode", fmt.Errorf("unknown mode %q", mode))
	}
}
