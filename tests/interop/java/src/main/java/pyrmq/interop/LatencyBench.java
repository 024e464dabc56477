package pyrmq.interop;

import java.nio.ByteBuffer;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentSkipListMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import org.HdrHistogram.Histogram;
import org.HdrHistogram.Recorder;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.RPCHook;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.RequestCode;
import org.apache.rocketmq.remoting.protocol.ResponseCode;
import org.apache.rocketmq.remoting.protocol.header.PullMessageRequestHeader;

/**
 * The open-loop latency benchmark of benchmarks/test_latency.py, shaped like the OpenMessaging
 * Benchmark's RocketMQ driver: one producer sending at a fixed rate with the client's autoBatch on
 * (asynchronous sends, a callback per message), and one push consumer in the same JVM.
 *
 * <pre>
 *   LatencyBench namesrv topic [--rate=50000 --body-bytes=1024 --warmup-s=10 --ramp-s=5
 *                               --duration-s=30 --drain-s=10 --report-s=5 --queues=16
 *                               --group=pyrmq_latency --timeout-s=120]
 * </pre>
 *
 * <p>The producer starts once the push consumer holds all `queues` queues of the topic (or after
 * 30 s, with a warning), so that the run does not begin with a backlog. Open loop: each message
 * is due one interval (1 / rate) after the one before, whatever happened to earlier ones (a slow
 * broker does not slow the producer down, so stalls are not hidden: coordinated omission). The
 * sender thread sends every message that is due, then parks until the next one. During the
 * first ramp-s of the warm-up the rate climbs linearly from a tenth of `rate` to `rate`: a cold
 * client JVM (its JIT compiling on the same two cores as the broker) sent the full rate at once
 * fell into send timeouts it never recovered from, for either broker, in one CI run. The
 * measured window always runs at the full rate (ramp-s is at most warmup-s). Each body starts
 * with the System.nanoTime() of its send call (8 bytes), so the consumer, in this JVM, measures
 * end-to-end latency (send call to the consumer's listener) with the same clock.
 *
 * <p>Publish latency: send call to the send callback (the broker's acknowledgement, after the
 * client's batching). Only messages sent inside the measured window (warmup-s after the start,
 * for duration-s) count, for both latencies; after the window the consumer gets drain-s to
 * receive what was sent in it. Histograms are HdrHistogram (microseconds, 3 significant digits).
 *
 * <p>Output: "WINDOW_OPEN" and "WINDOW_CLOSED" around the measured window; every report-s one
 * line "INTERVAL t_s pub_p99_ms pub_max_ms e2e_p99_ms e2e_max_ms sent received pulls found
 * msgs_per_found ready ready_rtt_p50_ms ready_rtt_p99_ms dwell_p99_ms gap_p50_ms gap_p99_ms"
 * (all messages and pulls of that interval, warm-up included; a ready pull is one sent when its
 * queue's last answer had shown messages beyond its offset, so long polling did not hold it; a
 * message's dwell is from its pull's answer to the listener; a queue's gap is from a pull's
 * answer to the queue's next pull: see PullTimes); then one line
 * of JSON: {"rate", "sent", "send_errors", "acked", "received", "missing", "behind_max_ms",
 * "publish": {"p50_ms", "p99_ms", "p999_ms", "max_ms"}, "e2e": {...}, "client_cpu_pct"},
 * counting the window's messages only.
 * behind_max_ms is how far the sender fell behind its schedule in the window: a send blocks when
 * the client holds too many unacknowledged messages (its async back-pressure), so a large value
 * means the broker (or this machine) did not keep up with the rate. The window closes on time
 * whatever the sender does. The first 20 send errors of the window go to stderr. Exit 0 unless
 * the arguments are bad.
 */
public final class LatencyBench {
    static final String USAGE = "LatencyBench <namesrv> <topic> [--rate=50000] [--body-bytes=1024]"
        + " [--warmup-s=10] [--ramp-s=5] [--duration-s=30] [--drain-s=10] [--report-s=5]"
        + " [--queues=16]"
        + " [--group=pyrmq_latency] [--timeout-s=120]";
    private static final String PRODUCER_GROUP = "pyrmq_latency_producer";
    private static final long HIGHEST_US = 3_600_000_000L;
    private static final long ERRORS_PRINTED_MAX = 20;
    private static final long ASSIGN_TIMEOUT_NANOS = 30_000_000_000L;

    private LatencyBench() {
    }

    /** The latencies and counts shared by the sender, the callbacks and the consumer. */
    static final class Stats {
        // Set once the consumer holds its queues; until then nothing counts.
        volatile long measureFrom = Long.MAX_VALUE;
        volatile long measureTo = Long.MAX_VALUE;
        final Recorder publish = new Recorder(HIGHEST_US, 3);
        final Recorder e2e = new Recorder(HIGHEST_US, 3);
        final Recorder publishInterval = new Recorder(HIGHEST_US, 3);
        final Recorder e2eInterval = new Recorder(HIGHEST_US, 3);
        final AtomicLong acked = new AtomicLong();
        final AtomicLong measuredErrors = new AtomicLong();
        final AtomicLong received = new AtomicLong();
        final AtomicLong sentInterval = new AtomicLong();
        final AtomicLong receivedInterval = new AtomicLong();

        void window(long from, long to) {
            measureTo = to;
            measureFrom = from;
        }

        boolean measured(long sentAt) {
            return sentAt >= measureFrom && sentAt < measureTo;
        }
    }

    public static void main(String[] argv) throws Exception {
        Common.Args args = Common.Args.parse(argv, 2, USAGE);
        String namesrv = args.get(0);
        String topic = args.get(1);
        int rate = args.intOption("rate", 50_000);
        int bodyBytes = Math.max(8, args.intOption("body-bytes", 1024));
        long warmupNanos = args.intOption("warmup-s", 10) * 1_000_000_000L;
        long rampNanos = Math.min(warmupNanos, args.intOption("ramp-s", 5) * 1_000_000_000L);
        long durationNanos = args.intOption("duration-s", 30) * 1_000_000_000L;
        long drainNanos = args.intOption("drain-s", 10) * 1_000_000_000L;
        long reportNanos = Math.max(1, args.intOption("report-s", 5)) * 1_000_000_000L;
        String group = args.option("group", "pyrmq_latency");
        int queues = args.intOption("queues", 16);
        Common.watchdog(args.intOption("timeout-s", 120));

        PullTimes pullTimes = new PullTimes();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group, pullTimes);
        Common.configureClient(consumer, namesrv, "latency-consumer");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET);
        consumer.subscribe(topic, "*");
        Stats stats = new Stats();
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            long now = System.nanoTime();
            for (MessageExt msg : msgs) {
                byte[] body = msg.getBody();
                if (body == null || body.length < 8) {
                    continue;
                }
                long sentAt = ByteBuffer.wrap(body, 0, 8).getLong();
                long micros = Math.max(0, (now - sentAt) / 1000);
                pullTimes.consumed(msg, now);
                stats.e2eInterval.recordValue(Math.min(micros, HIGHEST_US));
                stats.receivedInterval.incrementAndGet();
                if (stats.measured(sentAt)) {
                    stats.e2e.recordValue(Math.min(micros, HIGHEST_US));
                    stats.received.incrementAndGet();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        // The producer starts once the consumer holds every queue: messages sent before would
        // wait for the rebalance and start the run with a backlog.
        long assignDeadline = System.nanoTime() + ASSIGN_TIMEOUT_NANOS;
        while (consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable()
                .size() < queues && System.nanoTime() < assignDeadline) {
            LockSupport.parkNanos(10_000_000L);
        }
        int assigned = consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl()
            .getProcessQueueTable().size();
        if (assigned < queues) {
            Common.err("WARNING the consumer holds " + assigned + " of " + queues + " queues");
        }
        long start = System.nanoTime() + 1_000_000_000L;
        stats.window(start + warmupNanos, start + warmupNanos + durationNanos);

        DefaultMQProducer producer = new DefaultMQProducer(PRODUCER_GROUP);
        Common.configureClient(producer, namesrv, "latency-producer");
        producer.setSendMsgTimeout(3000);
        producer.setAutoBatch(true);
        producer.start();

        Thread reporter = new Thread(() -> report(stats, pullTimes, start, reportNanos),
            "latency-report");
        reporter.setDaemon(true);
        reporter.start();
        Sender sender = new Sender(producer, topic, rate, start, rampNanos, stats,
            Common.body("latency", bodyBytes));
        Thread senderThread = new Thread(sender, "latency-sender");
        senderThread.start();
        waitUntil(stats.measureFrom);
        long cpuAtOpen = LoadGenCpu.processCpuNanos();
        Common.out("WINDOW_OPEN");
        // The window closes on time even when the sender is stuck in a send (a broker that
        // cannot keep up makes the client block): it is told to stop and given a moment.
        waitUntil(stats.measureTo);
        sender.stop = true;
        long behindAtClose = sender.behindNow(System.nanoTime());
        long cpuAtClose = LoadGenCpu.processCpuNanos();
        long closedAt = System.nanoTime();
        Common.out("WINDOW_CLOSED");
        senderThread.join(5_000);
        long measuredSent = sender.measuredSent;
        long behindMax = Math.max(sender.behindMax, behindAtClose);
        // The consumer gets drain-s to receive what the window sent; then the figures are final.
        long drainUntil = System.nanoTime() + drainNanos;
        while (System.nanoTime() < drainUntil
            && (stats.received.get() < measuredSent
                || stats.acked.get() + stats.measuredErrors.get() < measuredSent)) {
            LockSupport.parkNanos(10_000_000L);
        }
        Histogram publish = stats.publish.getIntervalHistogram();
        Histogram e2e = stats.e2e.getIntervalHistogram();
        long received = stats.received.get();
        String json = String.format(Locale.ROOT,
            "{\"rate\": %d, \"body_bytes\": %d, \"seconds\": %.1f, \"sent\": %d, \"send_errors\": %d,"
                + " \"acked\": %d, \"received\": %d, \"missing\": %d, \"behind_max_ms\": %.3f,"
                + " \"publish\": %s, \"e2e\": %s, \"client_cpu_pct\": %.1f}",
            rate, bodyBytes, durationNanos / 1e9, measuredSent, stats.measuredErrors.get(),
            stats.acked.get(), received, Math.max(0, measuredSent - received), behindMax / 1e6,
            percentiles(publish), percentiles(e2e),
            100.0 * (cpuAtClose - cpuAtOpen) / Math.max(1, closedAt - stats.measureFrom));
        Common.out(json);
        producer.shutdown();
        consumer.shutdown();
        System.exit(Common.EXIT_OK);
    }

    /** Sends each message one interval after the one before (open loop), until told to stop. */
    static final class Sender implements Runnable {
        /** The ramp starts at this fraction of the rate. */
        static final double RAMP_FROM = 0.1;
        final DefaultMQProducer producer;
        final String topic;
        final int rate;
        final long start;
        final long rampNanos;
        final Stats stats;
        final byte[] template;
        volatile boolean stop;
        volatile long sent;
        volatile long measuredSent;
        volatile long behindMax;
        // When the next message is due (nanoTime; a double so that 1e9 / rate adds up exactly
        // enough: over an hour the error stays far below a microsecond).
        private volatile double nextDue;

        Sender(DefaultMQProducer producer, String topic, int rate, long start, long rampNanos,
               Stats stats, byte[] template) {
            this.producer = producer;
            this.topic = topic;
            this.rate = rate;
            this.start = start;
            this.rampNanos = rampNanos;
            this.stats = stats;
            this.template = template;
            this.nextDue = start;
        }

        /** The rate (msg/s) at `elapsed` nanoseconds after the start: the ramp, then `rate`. */
        double rateAt(double elapsed) {
            if (elapsed >= rampNanos) {
                return rate;
            }
            return rate * (RAMP_FROM + (1 - RAMP_FROM) * Math.max(0, elapsed) / rampNanos);
        }

        /** How far behind its schedule the sender is at `now` (0 when on time). */
        long behindNow(long now) {
            return Math.max(0, now - (long) nextDue);
        }

        @Override
        public void run() {
            while (!stop) {
                long now = System.nanoTime();
                long due = (long) nextDue;
                if (now < due) {
                    LockSupport.parkNanos(Math.max(due - now, 1_000));
                    continue;
                }
                byte[] body = template.clone();
                long sentAt = System.nanoTime();
                ByteBuffer.wrap(body).putLong(0, sentAt);
                boolean measured = stats.measured(sentAt);
                if (measured) {
                    behindMax = Math.max(behindMax, now - due);
                }
                send(body, sentAt, measured);
                sent++;
                nextDue += 1e9 / rateAt(nextDue - start);
                stats.sentInterval.incrementAndGet();
                if (measured) {
                    measuredSent++;
                }
            }
        }

        private void send(byte[] body, long sentAt, boolean measured) {
            try {
                producer.send(new Message(topic, body), new SendCallback() {
                    @Override
                    public void onSuccess(SendResult result) {
                        long micros = (System.nanoTime() - sentAt) / 1000;
                        if (result.getSendStatus() != SendStatus.SEND_OK) {
                            failed(measured, "status " + result.getSendStatus());
                            return;
                        }
                        stats.publishInterval.recordValue(Math.min(micros, HIGHEST_US));
                        if (measured) {
                            stats.publish.recordValue(Math.min(micros, HIGHEST_US));
                            stats.acked.incrementAndGet();
                        }
                    }

                    @Override
                    public void onException(Throwable e) {
                        failed(measured, e.toString());
                    }
                });
            } catch (Exception e) {
                failed(measured, e.toString());
            }
        }

        private void failed(boolean measured, String why) {
            if (measured && stats.measuredErrors.incrementAndGet() <= ERRORS_PRINTED_MAX) {
                Common.err("ERROR send " + why);
            }
        }
    }

    private static void waitUntil(long at) {
        long left;
        while ((left = at - System.nanoTime()) > 0) {
            LockSupport.parkNanos(left);
        }
    }

    /** Every reportNanos, one INTERVAL line for the messages of that interval. */
    private static void report(Stats stats, PullTimes pulls, long start, long reportNanos) {
        long next = start + reportNanos;
        while (true) {
            long left = next - System.nanoTime();
            if (left > 0) {
                LockSupport.parkNanos(left);
                continue;
            }
            Histogram publish = stats.publishInterval.getIntervalHistogram();
            Histogram e2e = stats.e2eInterval.getIntervalHistogram();
            Histogram readyRtt = pulls.readyRtt.getIntervalHistogram();
            Histogram dwell = pulls.dwell.getIntervalHistogram();
            Histogram gap = pulls.gap.getIntervalHistogram();
            long found = pulls.found.getAndSet(0);
            long pulled = pulls.messages.getAndSet(0);
            Common.out(String.format(Locale.ROOT,
                "INTERVAL %.0f %.3f %.3f %.3f %.3f %d %d %d %d %.1f %d %.3f %.3f %.3f %.3f %.3f",
                (next - start) / 1e9, ms(publish, 99.0), maxMs(publish), ms(e2e, 99.0), maxMs(e2e),
                stats.sentInterval.getAndSet(0), stats.receivedInterval.getAndSet(0),
                pulls.pulls.getAndSet(0), found, found == 0 ? 0.0 : (double) pulled / found,
                readyRtt.getTotalCount(), ms(readyRtt, 50.0), ms(readyRtt, 99.0), ms(dwell, 99.0),
                ms(gap, 50.0), ms(gap, 99.0)));
            next += reportNanos;
        }
    }

    private static double ms(Histogram histogram, double percentile) {
        return histogram.getTotalCount() == 0 ? 0.0 : histogram.getValueAtPercentile(percentile) / 1000.0;
    }

    private static double maxMs(Histogram histogram) {
        return histogram.getTotalCount() == 0 ? 0.0 : histogram.getMaxValue() / 1000.0;
    }

    private static String percentiles(Histogram histogram) {
        if (histogram.getTotalCount() == 0) {
            return "null";
        }
        return String.format(Locale.ROOT,
            "{\"count\": %d, \"p50_ms\": %.3f, \"p99_ms\": %.3f, \"p999_ms\": %.3f, \"max_ms\": %.3f}",
            histogram.getTotalCount(), ms(histogram, 50.0), ms(histogram, 99.0), ms(histogram, 99.9),
            maxMs(histogram));
    }

    /**
     * The push consumer's pulls, seen by an RPCHook around each request and its answer: how many
     * were answered, how many found messages and how many, and the round trip of those sent when
     * the queue's last answer had already shown messages beyond the pull's offset: such a pull
     * finds messages at once (long polling does not hold it), so its round trip is the broker's
     * and this JVM's service time. Also each message's dwell in this JVM: from its pull's answer
     * to the listener, the part of the end-to-end latency no broker is in; and each queue's gap
     * from a pull's answer to its next pull, which this JVM alone spends (with the round trip,
     * a queue's pull cycle).
     */
    static final class PullTimes implements RPCHook {
        /** A pull in flight: when it was sent, and whether it was sure to find messages. */
        private record Sent(long at, boolean ready) {
        }

        private final ConcurrentHashMap<Integer, Sent> inFlight = new ConcurrentHashMap<>();
        private final ConcurrentHashMap<String, Long> maxOffsets = new ConcurrentHashMap<>();
        // Per queue, each answered pull's first offset -> {its end offset, when it was answered}.
        private final ConcurrentHashMap<String, ConcurrentSkipListMap<Long, long[]>> answers =
            new ConcurrentHashMap<>();
        // Per queue, when its last pull was answered (until its next pull is sent).
        private final ConcurrentHashMap<String, Long> answeredAt = new ConcurrentHashMap<>();
        final Recorder readyRtt = new Recorder(HIGHEST_US, 3);
        final Recorder dwell = new Recorder(HIGHEST_US, 3);
        final Recorder gap = new Recorder(HIGHEST_US, 3);
        final AtomicLong pulls = new AtomicLong();
        final AtomicLong found = new AtomicLong();
        final AtomicLong messages = new AtomicLong();

        private static final long ANSWERS_KEPT_OFFSETS = 100_000;

        private static String queueKey(String topic, int queueId) {
            return topic + "@" + queueId;
        }

        /** `nanos` (a duration) in microseconds, into `recorder`, within its range. */
        private static void recordNanos(Recorder recorder, long nanos) {
            recorder.recordValue(Math.min(Math.max(0, nanos / 1000), HIGHEST_US));
        }

        @Override
        public void doBeforeRequest(String remoteAddr, RemotingCommand request) {
            if (request.getCode() == RequestCode.PULL_MESSAGE
                && request.readCustomHeader() instanceof PullMessageRequestHeader header) {
                long now = System.nanoTime();
                String queue = queueKey(header.getTopic(), header.getQueueId());
                Long known = maxOffsets.get(queue);
                inFlight.put(request.getOpaque(), new Sent(now,
                    known != null && known > header.getQueueOffset()));
                Long answered = answeredAt.remove(queue);
                if (answered != null) {
                    recordNanos(gap, now - answered);
                }
            }
        }

        @Override
        public void doAfterResponse(String remoteAddr, RemotingCommand request,
                                    RemotingCommand response) {
            if (request.getCode() != RequestCode.PULL_MESSAGE) {
                return;
            }
            Sent sent = inFlight.remove(request.getOpaque());
            if (sent == null || response == null || response.getExtFields() == null
                || !(request.readCustomHeader() instanceof PullMessageRequestHeader header)) {
                return;
            }
            pulls.incrementAndGet();
            long now = System.nanoTime();
            String queue = queueKey(header.getTopic(), header.getQueueId());
            answeredAt.put(queue, now);
            String next = response.getExtFields().get("nextBeginOffset");
            String max = response.getExtFields().get("maxOffset");
            if (max != null) {
                maxOffsets.put(queue, Long.parseLong(max));
            }
            if (response.getCode() != ResponseCode.SUCCESS || next == null) {
                return;
            }
            long first = header.getQueueOffset();
            long end = Long.parseLong(next);
            found.incrementAndGet();
            messages.addAndGet(end - first);
            ConcurrentSkipListMap<Long, long[]> byOffset =
                answers.computeIfAbsent(queue, key -> new ConcurrentSkipListMap<>());
            byOffset.put(first, new long[] {end, now});
            byOffset.headMap(first - ANSWERS_KEPT_OFFSETS).clear();
            if (sent.ready()) {
                recordNanos(readyRtt, now - sent.at());
            }
        }

        /** The listener got `msg` at `now`: its dwell since its pull's answer. */
        void consumed(MessageExt msg, long now) {
            ConcurrentSkipListMap<Long, long[]> byOffset =
                answers.get(queueKey(msg.getTopic(), msg.getQueueId()));
            Map.Entry<Long, long[]> answer =
                byOffset == null ? null : byOffset.floorEntry(msg.getQueueOffset());
            if (answer != null && msg.getQueueOffset() < answer.getValue()[0]) {
                recordNanos(dwell, now - answer.getValue()[1]);
            }
        }
    }

    /** The JVM's CPU time (all threads). */
    private static final class LoadGenCpu {
        static long processCpuNanos() {
            com.sun.management.OperatingSystemMXBean os = (com.sun.management.OperatingSystemMXBean)
                java.lang.management.ManagementFactory.getOperatingSystemMXBean();
            return os.getProcessCpuTime();
        }
    }
}
