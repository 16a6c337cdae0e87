package franzgo

// Decision 0045's gate: franz-go reads across control batches of types it does not know
// (KRaft's LEADER_CHANGE and a Sluice type), as one log per replica would keep Raft's own
// entries. tests/go/run.sh starts a broker with the failpoint `log.raft_control_batches`, which
// appends two of them after every produce batch, and names it in SLUICE_CONTROL_BOOTSTRAP.

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func readAll(t *testing.T, seed, topic string, level kgo.IsolationLevel, want int) []*kgo.Record {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seed),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(level))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	deadline := time.Now().Add(30 * time.Second)
	quiet := time.Time{}
	for time.Now().Before(deadline) && (quiet.IsZero() || time.Now().Before(quiet)) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachError(func(_ string, _ int32, err error) {
			if err != context.DeadlineExceeded {
				t.Fatalf("fetch: %v", err)
			}
		})
		out = append(out, fs.Records()...)
		if len(out) >= want && quiet.IsZero() {
			quiet = time.Now().Add(500 * time.Millisecond)
		}
	}
	return out
}

func TestReadsAcrossRaftControlBatches(t *testing.T) {
	seed := os.Getenv("SLUICE_CONTROL_BOOTSTRAP")
	if seed == "" {
		t.Skip("SLUICE_CONTROL_BOOTSTRAP is not set (tests/go/run.sh sets it)")
	}
	ctx := context.Background()
	topic := fmt.Sprintf("ctl-%d", time.Now().UnixNano())
	cl, err := kgo.NewClient(kgo.SeedBrokers(seed), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kadm.NewClient(cl).CreateTopics(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	var committed []string
	for i := 0; i < 200; i++ {
		v := fmt.Sprintf("i%d", i)
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		committed = append(committed, v)
	}
	cl.Close()
	tx, err := kgo.NewClient(kgo.SeedBrokers(seed), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionalID(topic+"-t"))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	for round, commit := range []kgo.TransactionEndTry{kgo.TryAbort, kgo.TryCommit} {
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 20; i++ {
			v := fmt.Sprintf("t%d-%d", round, i)
			if err := tx.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			if commit == kgo.TryCommit {
				committed = append(committed, v)
			}
		}
		if err := tx.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	rc := readAll(t, seed, topic, kgo.ReadCommitted(), len(committed))
	if len(rc) != len(committed) {
		t.Fatalf("read_committed: %d records, want %d", len(rc), len(committed))
	}
	for i, r := range rc {
		if string(r.Value) != committed[i] {
			t.Fatalf("read_committed: record %d is %q, want %q", i, r.Value, committed[i])
		}
	}
	ru := readAll(t, seed, topic, kgo.ReadUncommitted(), len(committed)+20)
	if len(ru) != len(committed)+20 {
		t.Fatalf("read_uncommitted: %d records, want %d", len(ru), len(committed)+20)
	}
	last := ru[len(ru)-1].Offset
	for i := 1; i < len(ru); i++ {
		if ru[i].Offset <= ru[i-1].Offset {
			t.Fatalf("offsets do not ascend at %d", i)
		}
	}
	// every batch was followed by two control batches: the offsets have gaps
	if last < 3*200 {
		t.Fatalf("the control batches took no offsets: last offset %d", last)
	}
}
