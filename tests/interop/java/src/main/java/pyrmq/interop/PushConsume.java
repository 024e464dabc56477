package pyrmq.interop;

import java.util.Set;
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
 * Consumes with DefaultMQPushConsumer (clustering, concurrently) until expected distinct keys have
 * been consumed successfully, or the timeout. Prints one line per delivery:
 *
 * <pre>
 *   RECEIVED key reconsumeTimes queueId queueOffset bodyBytes bodyCrc32 tags   (consumed: CONSUME_SUCCESS)
 *   REJECTED key reconsumeTimes                                               (returned RECONSUME_LATER)
 *   DONE distinctKeys                       (exit 0)
 *   TIMEOUT distinctKeys expected           (exit 3)
 * </pre>
 *
 * With --fail-every=N, the first delivery of every Nth new key (in arrival order) is rejected, so
 * the broker redelivers it through the group's retry topic after --retry-delay-level (1 = 1 s).
 * For a redelivered message, queueId and queueOffset are those of the retry topic.
 */
public final class PushConsume {
    static final String USAGE = "PushConsume <namesrv> <group> <topic> <tagExpression> <expected>"
        + " [--fail-every=0] [--retry-delay-level=1] [--timeout-s=60] [--linger-ms=0]"
        + " [--from=first|last] [--threads=4]";

    private PushConsume() {
    }

    public static void main(String[] argv) throws Exception {
        Common.Args args = Common.Args.parse(argv, 5, USAGE);
        String namesrv = args.get(0);
        String group = args.get(1);
        String topic = args.get(2);
        String tagExpression = args.get(3);
        int expected = args.getInt(4);
        int failEvery = args.intOption("fail-every", 0);
        int retryDelayLevel = args.intOption("retry-delay-level", 1);
        int timeoutS = args.intOption("timeout-s", 60);
        int lingerMs = args.intOption("linger-ms", 0);
        int threads = args.intOption("threads", 4);
        String from = args.option("from", "first");
        Common.watchdog(timeoutS + lingerMs / 1000 + 15);

        Set<String> consumed = ConcurrentHashMap.newKeySet();
        Set<String> seenFirstDelivery = ConcurrentHashMap.newKeySet();
        AtomicInteger newKeys = new AtomicInteger();
        CountDownLatch done = new CountDownLatch(1);

        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        Common.configureClient(consumer, namesrv, "push");
        consumer.setMessageModel(MessageModel.CLUSTERING);
        consumer.setConsumeFromWhere("last".equals(from)
            ? ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET : ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setConsumeThreadMin(threads);
        consumer.setConsumeThreadMax(threads);
        consumer.subscribe(topic, tagExpression);
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            // consumeMessageBatchMaxSize is 1: a rejection concerns exactly this message.
            for (MessageExt msg : msgs) {
                String key = msg.getKeys() == null ? "-" : msg.getKeys();
                boolean firstDelivery = msg.getReconsumeTimes() == 0 && seenFirstDelivery.add(key);
                if (firstDelivery && failEvery > 0 && newKeys.incrementAndGet() % failEvery == 0) {
                    Common.out("REJECTED " + key + " " + msg.getReconsumeTimes());
                    context.setDelayLevelWhenNextConsume(retryDelayLevel);
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
                Common.printReceived(msg);
                if (consumed.add(key) && consumed.size() >= expected) {
                    done.countDown();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();

        boolean reached = expected == 0 || done.await(timeoutS, TimeUnit.SECONDS);
        if (reached && lingerMs > 0) {
            // Keep consuming a little longer so that duplicates show up as extra RECEIVED lines.
            Thread.sleep(lingerMs);
        }
        consumer.shutdown();
        if (reached) {
            Common.out("DONE " + consumed.size());
            System.exit(Common.EXIT_OK);
        }
        Common.out("TIMEOUT " + consumed.size() + " " + expected);
        System.exit(Common.EXIT_TIMEOUT);
    }
}
