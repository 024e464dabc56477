package pyrmq.interop;

import java.time.Instant;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.protocol.heartbeat.MessageModel;

/**
 * Consumes with DefaultMQPushConsumer and a MessageListenerOrderly (clustering) for --run-s
 * seconds, or until it consumed something and then nothing for --idle-stop-ms (0: never), then
 * shuts down (which unlocks its queues). Prints one line per consumed message:
 *
 * <pre>
 *   ORDERLY instance key queueId queueOffset reconsumeTimes startMicros endMicros
 *   STOPPED instance                                        (after shutdown, exit 0)
 * </pre>
 *
 * startMicros/endMicros are wall-clock microseconds around the listener call, which holds each
 * message --hold-ms: two consumers on one queue at once would show as overlapping intervals.
 */
public final class OrderlyConsume {
    static final String USAGE = "OrderlyConsume <namesrv> <group> <topic> <tagExpression> <instance>"
        + " [--run-s=10] [--idle-stop-ms=0] [--hold-ms=5] [--threads=4]";

    private OrderlyConsume() {
    }

    static long micros() {
        Instant now = Instant.now();
        return now.getEpochSecond() * 1_000_000L + now.getNano() / 1_000;
    }

    public static void main(String[] argv) throws Exception {
        Common.Args args = Common.Args.parse(argv, 5, USAGE);
        String namesrv = args.get(0);
        String group = args.get(1);
        String topic = args.get(2);
        String tagExpression = args.get(3);
        String instance = args.get(4);
        int runS = args.intOption("run-s", 10);
        int holdMs = args.intOption("hold-ms", 5);
        int threads = args.intOption("threads", 4);
        int idleStopMs = args.intOption("idle-stop-ms", 0);
        AtomicLong lastConsumedMs = new AtomicLong();
        Common.watchdog(runS + 60);

        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        Common.configureClient(consumer, namesrv, "orderly-" + instance);
        consumer.setMessageModel(MessageModel.CLUSTERING);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setConsumeThreadMin(threads);
        consumer.setConsumeThreadMax(threads);
        consumer.subscribe(topic, tagExpression);
        consumer.registerMessageListener((MessageListenerOrderly) (msgs, context) -> {
            for (MessageExt msg : msgs) {
                long start = micros();
                try {
                    Thread.sleep(holdMs);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT;
                }
                String key = msg.getKeys() == null ? "-" : msg.getKeys();
                Common.out("ORDERLY " + instance + " " + key + " " + msg.getQueueId() + " "
                    + msg.getQueueOffset() + " " + msg.getReconsumeTimes() + " " + start + " " + micros());
                lastConsumedMs.set(System.currentTimeMillis());
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });
        consumer.start();
        long deadline = System.currentTimeMillis() + runS * 1000L;
        while (System.currentTimeMillis() < deadline) {
            long last = lastConsumedMs.get();
            if (idleStopMs > 0 && last > 0 && System.currentTimeMillis() - last > idleStopMs) {
                break;
            }
            TimeUnit.MILLISECONDS.sleep(100);
        }
        consumer.shutdown();
        Common.out("STOPPED " + instance);
        System.exit(Common.EXIT_OK);
    }
}
