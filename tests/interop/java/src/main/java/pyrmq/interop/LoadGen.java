package pyrmq.interop;

import com.sun.management.OperatingSystemMXBean;
import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * The load generator of benchmarks/test_broker_throughput.py: the same Java client workload against
 * any RocketMQ-compatible broker, measured after a warm-up, reported as one line of JSON on stdout.
 *
 * <pre>
 *   LoadGen namesrv topic sync|batch  [--producers=16 --body-bytes=1024 --batch-size=32
 *                                      --warmup-s=3 --duration-s=10 --retries=0
 *                                      --shared-producer=false --timeout-s=120]
 *   LoadGen namesrv topic pull        [--group=... --count=1000000 --pull-batch-size=32
 *                                      --warmup-s=2 --duration-s=8 --timeout-s=120]
 * </pre>
 *
 * <p>sync and batch: `producers` threads, each with its own DefaultMQProducer (its own client
 * instance, so its own TCP connection to the broker; with --shared-producer=true all threads share
 * one producer and its one connection, as an application usually does), send back to back for warmup-s + duration-s:
 * one message per send (sync) or a batch of batch-size messages per send (batch), bodies of
 * body-bytes, the client choosing queues round-robin as usual. Only sends started inside the
 * measured window count; their latency (send call to acknowledgement) gives p50 and p99. A send
 * that throws or answers other than SEND_OK is an error (retries are 0 by default: errors show).
 *
 * <p>pull: a DefaultLitePullConsumer (subscribe mode, a new group, from the first offset) polls
 * messages that are already stored; the window starts warmup-s after the first message arrived and
 * ends after duration-s, after count messages, or at the last message before 1 s without any
 * (the topic ran dry). p50_ms and p99_ms are null: polls hand out prefetched messages.
 *
 * <p>Output: "WINDOW_OPEN" when the measured window opens, "WINDOW_CLOSED" when it closed (so
 * that a caller can sample the broker's CPU time over the window), then one line of JSON: {"mode", "msgs_per_s", "p50_ms", "p99_ms", "errors", "messages",
 * "seconds", "sends", "total_messages", "client_cpu_pct"}; client_cpu_pct is this JVM's CPU time
 * over the window, in per cent of one core. Exit 0 unless the arguments are bad.
 */
public final class LoadGen {
    static final String USAGE = "LoadGen <namesrv> <topic> <sync|batch|pull> [--producers=16]"
        + " [--body-bytes=1024] [--batch-size=32] [--warmup-s=3] [--duration-s=10] [--retries=0]"
        + " [--shared-producer=false]"
        + " [--group=pyrmq_loadgen_pull] [--count=1000000] [--pull-batch-size=32] [--timeout-s=120]";
    private static final String PRODUCER_GROUP = "pyrmq_loadgen_producer";
    private static final long IDLE_END_NANOS = 1_000_000_000L;

    private LoadGen() {
    }

    public static void main(String[] argv) throws Exception {
        Common.Args args = Common.Args.parse(argv, 3, USAGE);
        String namesrv = args.get(0);
        String topic = args.get(1);
        String mode = args.get(2);
        Common.watchdog(args.intOption("timeout-s", 120));
        String json;
        switch (mode) {
            case "sync":
            case "batch":
                json = send(namesrv, topic, mode, args);
                break;
            case "pull":
                json = pull(namesrv, topic, args);
                break;
            default:
                Common.usage(USAGE, "unknown mode " + mode);
                return;
        }
        Common.out(json);
        System.exit(Common.EXIT_OK);
    }

    /** A growable array of longs: latencies without boxing. */
    private static final class Longs {
        long[] values = new long[1 << 14];
        int size;

        void add(long value) {
            if (size == values.length) {
                values = Arrays.copyOf(values, size * 2);
            }
            values[size++] = value;
        }
    }

    /** One producer thread's counts over the measured window. */
    private static final class Sender implements Runnable {
        final DefaultMQProducer producer;
        final String topic;
        final boolean batch;
        final int batchSize;
        final byte[] body;
        final long measureFrom;
        final long stopAt;
        final AtomicLong errors;
        final Longs latencies = new Longs();
        long messages;
        long totalMessages;
        long lastDone;

        Sender(DefaultMQProducer producer, String topic, boolean batch, int batchSize, byte[] body,
               long measureFrom, long stopAt, AtomicLong errors) {
            this.producer = producer;
            this.topic = topic;
            this.batch = batch;
            this.batchSize = batchSize;
            this.body = body;
            this.measureFrom = measureFrom;
            this.stopAt = stopAt;
            this.errors = errors;
        }

        @Override
        public void run() {
            int perSend = batch ? batchSize : 1;
            while (true) {
                long started = System.nanoTime();
                if (started >= stopAt) {
                    return;
                }
                boolean ok;
                try {
                    SendResult result;
                    if (batch) {
                        List<Message> messages = new ArrayList<>(batchSize);
                        for (int i = 0; i < batchSize; i++) {
                            messages.add(new Message(topic, body));
                        }
                        result = producer.send(messages);
                    } else {
                        result = producer.send(new Message(topic, body));
                    }
                    ok = result.getSendStatus() == SendStatus.SEND_OK;
                    if (!ok) {
                        Common.err("ERROR send status " + result.getSendStatus());
                    }
                } catch (Exception e) {
                    // The client wraps the broker's answer (MQBrokerException: its code).
                    Common.err("ERROR " + e + (e.getCause() == null ? "" : " cause: " + e.getCause()));
                    ok = false;
                }
                long done = System.nanoTime();
                if (!ok) {
                    if (started >= measureFrom) {
                        errors.incrementAndGet();
                    }
                    continue;
                }
                totalMessages += perSend;
                if (started >= measureFrom) {
                    messages += perSend;
                    latencies.add(done - started);
                    lastDone = done;
                }
            }
        }
    }

    private static String send(String namesrv, String topic, String mode, Common.Args args)
        throws Exception {
        int producers = args.intOption("producers", 16);
        int bodyBytes = args.intOption("body-bytes", 1024);
        int batchSize = args.intOption("batch-size", 32);
        int retries = args.intOption("retries", 0);
        long warmupNanos = args.intOption("warmup-s", 3) * 1_000_000_000L;
        long durationNanos = args.intOption("duration-s", 10) * 1_000_000_000L;
        boolean batch = "batch".equals(mode);
        byte[] body = Common.body("loadgen", bodyBytes);

        boolean shared = Boolean.parseBoolean(args.option("shared-producer", "false"));
        List<DefaultMQProducer> started = new ArrayList<>(producers);
        for (int i = 0; i < (shared ? 1 : producers); i++) {
            DefaultMQProducer producer = new DefaultMQProducer(PRODUCER_GROUP);
            // A distinct instance name per producer: its own client instance and connection.
            Common.configureClient(producer, namesrv, "loadgen-" + i);
            producer.setSendMsgTimeout(3000);
            producer.setRetryTimesWhenSendFailed(retries);
            producer.start();
            started.add(producer);
        }
        long measureFrom = System.nanoTime() + warmupNanos;
        long stopAt = measureFrom + durationNanos;
        AtomicLong errors = new AtomicLong();
        List<Sender> senders = new ArrayList<>(producers);
        List<Thread> threads = new ArrayList<>(producers);
        for (int i = 0; i < producers; i++) {
            Sender sender = new Sender(started.get(shared ? 0 : i), topic, batch, batchSize, body, measureFrom,
                stopAt, errors);
            senders.add(sender);
            Thread thread = new Thread(sender, "loadgen-" + i);
            threads.add(thread);
            thread.start();
        }
        long cpuAtMeasure = waitUntilThenCpu(measureFrom);
        Common.out("WINDOW_OPEN");
        for (Thread thread : threads) {
            thread.join();
        }
        long cpuAtEnd = processCpuNanos();
        long endAt = System.nanoTime();
        Common.out("WINDOW_CLOSED");
        for (DefaultMQProducer producer : started) {
            producer.shutdown();
        }

        long messages = 0;
        long totalMessages = 0;
        long lastDone = measureFrom;
        Longs all = new Longs();
        for (Sender sender : senders) {
            messages += sender.messages;
            totalMessages += sender.totalMessages;
            lastDone = Math.max(lastDone, sender.lastDone);
            for (int i = 0; i < sender.latencies.size; i++) {
                all.add(sender.latencies.values[i]);
            }
        }
        long[] sorted = Arrays.copyOf(all.values, all.size);
        Arrays.sort(sorted);
        double seconds = Math.max(lastDone - measureFrom, 1) / 1e9;
        return String.format(Locale.ROOT,
            "{\"mode\": \"%s\", \"producers\": %d, \"body_bytes\": %d, \"batch_size\": %d,"
                + " \"msgs_per_s\": %.1f, \"p50_ms\": %s, \"p99_ms\": %s, \"errors\": %d,"
                + " \"messages\": %d, \"seconds\": %.3f, \"sends\": %d, \"total_messages\": %d,"
                + " \"client_cpu_pct\": %.1f}",
            mode, producers, bodyBytes, batch ? batchSize : 1, messages / seconds,
            percentileMs(sorted, 0.50), percentileMs(sorted, 0.99), errors.get(), messages,
            seconds, sorted.length, totalMessages,
            100.0 * (cpuAtEnd - cpuAtMeasure) / Math.max(1, endAt - measureFrom));
    }

    private static String pull(String namesrv, String topic, Common.Args args) throws Exception {
        long count = args.intOption("count", 1_000_000);
        long warmupNanos = args.intOption("warmup-s", 2) * 1_000_000_000L;
        long durationNanos = args.intOption("duration-s", 8) * 1_000_000_000L;
        DefaultLitePullConsumer consumer =
            new DefaultLitePullConsumer(args.option("group", "pyrmq_loadgen_pull"));
        Common.configureClient(consumer, namesrv, "loadgen-pull");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setPullBatchSize(args.intOption("pull-batch-size", 32));
        consumer.setPollTimeoutMillis(100);
        consumer.setAutoCommitIntervalMillis(1000);
        consumer.setTopicMetadataCheckIntervalMillis(1000);
        consumer.subscribe(topic, "*");
        consumer.start();

        long total = 0;
        long firstAt = 0;
        long lastAt = 0;
        long measureFrom = 0;
        long stopAt = 0;
        long measured = 0;
        long lastMeasuredAt = 0;
        long cpuAtMeasure = 0;
        while (total < count) {
            List<MessageExt> messages = consumer.poll();
            long now = System.nanoTime();
            if (messages.isEmpty()) {
                if (lastAt != 0 && now - lastAt > IDLE_END_NANOS) {
                    break;  // ran dry: every stored message was read
                }
                continue;
            }
            total += messages.size();
            lastAt = now;
            if (firstAt == 0) {
                firstAt = now;
                continue;
            }
            if (measureFrom == 0) {
                if (now - firstAt >= warmupNanos) {
                    // The window opens at this poll; its own messages arrived before and do not count.
                    measureFrom = now;
                    stopAt = now + durationNanos;
                    cpuAtMeasure = processCpuNanos();
                    Common.out("WINDOW_OPEN");
                }
                continue;
            }
            measured += messages.size();
            lastMeasuredAt = now;
            if (now >= stopAt) {
                break;
            }
        }
        long cpuAtEnd = processCpuNanos();
        long endAt = System.nanoTime();
        if (measureFrom == 0) {
            Common.out("WINDOW_OPEN");  // never opened: the caller still sees both lines
        }
        Common.out("WINDOW_CLOSED");
        consumer.shutdown();
        double seconds = lastMeasuredAt > measureFrom ? (lastMeasuredAt - measureFrom) / 1e9 : 0.0;
        if (seconds == 0.0) {
            Common.err("ERROR no measured window: " + total + " messages in all, the topic ran dry"
                + " before the warm-up ended or nothing arrived");
        }
        return String.format(Locale.ROOT,
            "{\"mode\": \"pull\", \"msgs_per_s\": %.1f, \"p50_ms\": null, \"p99_ms\": null,"
                + " \"errors\": %d, \"messages\": %d, \"seconds\": %.3f, \"total_messages\": %d,"
                + " \"client_cpu_pct\": %.1f}",
            seconds > 0 ? measured / seconds : 0.0, seconds > 0 ? 0 : 1, measured, seconds, total,
            measureFrom > 0 ? 100.0 * (cpuAtEnd - cpuAtMeasure) / Math.max(1, endAt - measureFrom) : 0.0);
    }

    /** Sleeps until System.nanoTime() reaches `at`, then returns the process CPU time. */
    private static long waitUntilThenCpu(long at) throws InterruptedException {
        long left;
        while ((left = at - System.nanoTime()) > 0) {
            Thread.sleep(Math.max(1, left / 1_000_000), (int) (left % 1_000_000));
        }
        return processCpuNanos();
    }

    private static long processCpuNanos() {
        OperatingSystemMXBean os =
            (OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        return os.getProcessCpuTime();
    }

    /** The nearest-rank percentile of sorted nanoseconds, in ms; "null" when nothing was measured. */
    private static String percentileMs(long[] sorted, double fraction) {
        if (sorted.length == 0) {
            return "null";
        }
        int rank = (int) Math.ceil(fraction * sorted.length);
        int index = Math.min(sorted.length - 1, Math.max(0, rank - 1));
        return String.format(Locale.ROOT, "%.3f", sorted[index] / 1e6);
    }
}
