package pyrmq.interop;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientIDSetter;

/**
 * Sends count messages with DefaultMQProducer in one mode and prints one line per message:
 *
 * <pre>
 *   SENT msgId queueId queueOffset key sendStatus    (sync, async, batch: acknowledged by the broker)
 *   ONEWAY msgId key                                 (oneway: written to the socket, never acknowledged)
 *   ERROR key exception                              (on stderr; the exit code is then 1)
 * </pre>
 *
 * Keys are keyPrefix-0 .. keyPrefix-(count-1); bodies are Common.body(key, bodyBytes).
 */
public final class Produce {
    static final String USAGE = "Produce <namesrv> <topic> <count> <sync|async|oneway|batch> <tag>"
        + " [--key-prefix=MODE] [--body-bytes=128] [--batch-size=10] [--group=pyrmq_interop_producer]"
        + " [--send-timeout-ms=3000] [--retries=2] [--timeout-s=60]";

    private Produce() {
    }

    public static void main(String[] argv) throws Exception {
        Common.Args args = Common.Args.parse(argv, 5, USAGE);
        String namesrv = args.get(0);
        String topic = args.get(1);
        int count = args.getInt(2);
        String mode = args.get(3);
        String tag = args.get(4);
        String keyPrefix = args.option("key-prefix", mode);
        int bodyBytes = args.intOption("body-bytes", 128);
        int batchSize = args.intOption("batch-size", 10);
        int sendTimeoutMs = args.intOption("send-timeout-ms", 3000);
        int retries = args.intOption("retries", 2);
        int timeoutS = args.intOption("timeout-s", 60);
        Common.watchdog(timeoutS + 15);

        DefaultMQProducer producer = new DefaultMQProducer(args.option("group", "pyrmq_interop_producer"));
        Common.configureClient(producer, namesrv, "produce");
        producer.setSendMsgTimeout(sendTimeoutMs);
        producer.setRetryTimesWhenSendFailed(retries);
        producer.setRetryTimesWhenSendAsyncFailed(retries);
        producer.start();

        List<Message> messages = new ArrayList<>(count);
        for (int i = 0; i < count; i++) {
            String key = keyPrefix + "-" + i;
            Message msg = new Message(topic, tag, key, Common.body(key, bodyBytes));
            messages.add(msg);
        }

        boolean ok;
        try {
            switch (mode) {
                case "sync":
                    ok = sendSync(producer, messages);
                    break;
                case "async":
                    ok = sendAsync(producer, messages, timeoutS);
                    break;
                case "oneway":
                    ok = sendOneway(producer, messages);
                    break;
                case "batch":
                    ok = sendBatches(producer, messages, batchSize);
                    break;
                default:
                    Common.usage(USAGE, "unknown mode " + mode);
                    return;
            }
        } finally {
            producer.shutdown();
        }
        System.exit(ok ? Common.EXIT_OK : Common.EXIT_FAILED);
    }

    private static void printSent(SendResult result, Message msg, long queueOffset) {
        Common.out("SENT " + MessageClientIDSetter.getUniqID(msg) + " "
            + result.getMessageQueue().getQueueId() + " " + queueOffset + " " + msg.getKeys() + " "
            + result.getSendStatus());
    }

    private static boolean sendSync(DefaultMQProducer producer, List<Message> messages) {
        boolean ok = true;
        for (Message msg : messages) {
            try {
                SendResult result = producer.send(msg);
                printSent(result, msg, result.getQueueOffset());
            } catch (Exception e) {
                Common.err("ERROR " + msg.getKeys() + " " + e);
                ok = false;
            }
        }
        return ok;
    }

    private static boolean sendAsync(DefaultMQProducer producer, List<Message> messages, int timeoutS)
        throws InterruptedException {
        CountDownLatch done = new CountDownLatch(messages.size());
        AtomicBoolean ok = new AtomicBoolean(true);
        for (Message msg : messages) {
            try {
                producer.send(msg, new SendCallback() {
                    @Override
                    public void onSuccess(SendResult result) {
                        printSent(result, msg, result.getQueueOffset());
                        done.countDown();
                    }

                    @Override
                    public void onException(Throwable e) {
                        Common.err("ERROR " + msg.getKeys() + " " + e);
                        ok.set(false);
                        done.countDown();
                    }
                });
            } catch (Exception e) {
                Common.err("ERROR " + msg.getKeys() + " " + e);
                ok.set(false);
                done.countDown();
            }
        }
        if (!done.await(timeoutS, TimeUnit.SECONDS)) {
            Common.err("ERROR async sends still unanswered after " + timeoutS + " s: " + done.getCount());
            return false;
        }
        return ok.get();
    }

    private static boolean sendOneway(DefaultMQProducer producer, List<Message> messages) {
        boolean ok = true;
        for (Message msg : messages) {
            try {
                producer.sendOneway(msg);
                Common.out("ONEWAY " + MessageClientIDSetter.getUniqID(msg) + " " + msg.getKeys());
            } catch (Exception e) {
                Common.err("ERROR " + msg.getKeys() + " " + e);
                ok = false;
            }
        }
        return ok;
    }

    /** One SENT line per message of each acknowledged batch; the broker assigns consecutive offsets. */
    private static boolean sendBatches(DefaultMQProducer producer, List<Message> messages, int batchSize) {
        boolean ok = true;
        for (int start = 0; start < messages.size(); start += batchSize) {
            List<Message> batch = messages.subList(start, Math.min(messages.size(), start + batchSize));
            try {
                SendResult result = producer.send(batch);
                for (int i = 0; i < batch.size(); i++) {
                    printSent(result, batch.get(i), result.getQueueOffset() + i);
                }
            } catch (Exception e) {
                for (Message msg : batch) {
                    Common.err("ERROR " + msg.getKeys() + " " + e);
                }
                ok = false;
            }
        }
        return ok;
    }
}
