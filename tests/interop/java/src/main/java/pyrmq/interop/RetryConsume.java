package pyrmq.interop;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.protocol.heartbeat.MessageModel;

/**
 * A DefaultMQPushConsumer (clustering) whose listener always answers RECONSUME_LATER with
 * --delay-level, and whose maxReconsumeTimes is --max-reconsume-times: each message comes back
 * through the retry topic after the level's delay until the broker moves it to the DLQ. Prints
 * one line per delivery and stops once each of the expected keys was delivered
 * maxReconsumeTimes + 1 times (then lingers --linger-ms for extra deliveries):
 *
 * <pre>
 *   DELIVERY key reconsumeTimes receivedMillis
 *   DONE keys | TIMEOUT keys expected
 * </pre>
 */
public final class RetryConsume {
    static final String USAGE = "RetryConsume <namesrv> <group> <topic> <expected>"
        + " [--delay-level=1] [--max-reconsume-times=2] [--linger-ms=0] [--timeout-s=60]";

    private RetryConsume() {
    }

    public static void main(String[] argv) throws Exception {
        Common.Args args = Common.Args.parse(argv, 4, USAGE);
        String namesrv = args.get(0);
        String group = args.get(1);
        String topic = args.get(2);
        int expected = args.getInt(3);
        int delayLevel = args.intOption("delay-level", 1);
        int maxReconsumeTimes = args.intOption("max-reconsume-times", 2);
        int lingerMs = args.intOption("linger-ms", 0);
        int timeoutS = args.intOption("timeout-s", 60);
        Common.watchdog(timeoutS + lingerMs / 1000 + 15);

        Map<String, AtomicInteger> deliveries = new ConcurrentHashMap<>();
        AtomicInteger finishedKeys = new AtomicInteger();
        CountDownLatch done = new CountDownLatch(1);

        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        Common.configureClient(consumer, namesrv, "retry");
        consumer.setMessageModel(MessageModel.CLUSTERING);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setMaxReconsumeTimes(maxReconsumeTimes);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt msg : msgs) {
                String key = msg.getKeys() == null ? "-" : msg.getKeys();
                Common.out("DELIVERY " + key + " " + msg.getReconsumeTimes() + " "
                    + System.currentTimeMillis());
                int count = deliveries.computeIfAbsent(key, k -> new AtomicInteger()).incrementAndGet();
                if (count == maxReconsumeTimes + 1 && finishedKeys.incrementAndGet() >= expected) {
                    done.countDown();
                }
            }
            context.setDelayLevelWhenNextConsume(delayLevel);
            return ConsumeConcurrentlyStatus.RECONSUME_LATER;
        });
        consumer.start();
        boolean reached = done.await(timeoutS, TimeUnit.SECONDS);
        if (reached && lingerMs > 0) {
            Thread.sleep(lingerMs);
        }
        consumer.shutdown();
        if (reached) {
            Common.out("DONE " + finishedKeys.get());
            System.exit(Common.EXIT_OK);
        }
        Common.out("TIMEOUT " + finishedKeys.get() + " " + expected);
        System.exit(Common.EXIT_TIMEOUT);
    }
}
