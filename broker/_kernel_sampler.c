/*
 * broker._kernel_sampler: the loop monitor's sampler of its threads' kernel states, in a thread
 * that never takes the GIL.
 *
 * Why native: the monitor's Python watchdog needs the GIL to sample. In a stall in which another
 * thread holds it (or the loop holds it while blocked in a system call) the watchdog waits for
 * it with the loop, and samples nothing until the stall is over: such a stall was logged with
 * no kernel wait and no thread to name. This thread waits for the monitor's overdue timer (the
 * timerfd the loop's tick re-arms) and, for as long as it stays fired (not re-armed), every
 * period reads the loop thread's /proc stat (its state and CPU) and wchan, and the stat of each
 * other thread it was told to watch, into a ring the loop's late tick reads. On each firing it
 * also wakes the Python watchdog (an eventfd) for the Python stacks.
 *
 * What a sample says: a thread's state (`R` running or runnable, `S` asleep, `D` in an
 * uninterruptible wait), the CPU it is on or last ran on, and for the loop where it sleeps. A
 * thread whose vCPU the host stopped reads `R` on that CPU: the guest thinks it runs.
 *
 * Cost: nothing while the loop keeps time (one blocking poll); in a stall, some 2-5 us per
 * /proc read, a few reads per period.
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>
#include <structmember.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define THREADS_MAX 64   /* other threads watched at once (the broker has about ten) */
#define RING_SLOTS 8192  /* samples kept: the last ~100 periods of ~64 threads */
#define WCHAN_BYTES 32
#define STAT_BYTES 1024
#define PERIOD_NS_MIN 100000LL

typedef struct {
    int64_t t_ns; /* CLOCK_MONOTONIC, as time.monotonic() */
    int32_t tid;
    int32_t cpu;  /* -1: not read */
    char state;   /* 0: not read (the thread has ended) */
    char wchan[WCHAN_BYTES];
} kernel_sample;

typedef struct {
    PyObject_HEAD
    int timer_fd; /* the monitor's, not owned */
    int stop_fd;  /* eventfd: close() */
    int wake_fd;  /* eventfd: the Python watchdog's wake-up */
    int loop_tid;
    long long period_ns;
    pthread_t thread;
    int running;
    pthread_mutex_t lock; /* the ring, the watched threads and the counters */
    int tids[THREADS_MAX];
    int tid_count;
    uint64_t written; /* samples written so far; the ring holds the last RING_SLOTS */
    uint64_t wakes;
    kernel_sample *ring;
} Sampler;

static int64_t
monotonic_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

static int
open_task_file(int tid, const char *name)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/%s", tid, name);
    return open(path, O_RDONLY | O_CLOEXEC);
}

/* The state (field 3) and processor (field 39) of a /proc task stat line, counted after the
 * command name's closing parenthesis (the name may hold spaces and parentheses). */
static void
parse_stat(const char *text, char *state, int32_t *cpu)
{
    const char *p = strrchr(text, ')');
    *state = 0;
    *cpu = -1;
    if (p == NULL || p[1] != ' ')
        return;
    p += 2;
    *state = *p;
    for (int field = 3; field < 39; field++) {
        p = strchr(p, ' ');
        if (p == NULL)
            return;
        p++;
    }
    char *end;
    long value = strtol(p, &end, 10);
    if (end != p)
        *cpu = (int32_t)value;
}

static void
read_stat(int fd, kernel_sample *out)
{
    char text[STAT_BYTES];
    ssize_t got = fd < 0 ? -1 : pread(fd, text, sizeof text - 1, 0);
    out->state = 0;
    out->cpu = -1;
    if (got <= 0)
        return;
    text[got] = 0;
    parse_stat(text, &out->state, &out->cpu);
}

static void
read_wchan(int fd, kernel_sample *out)
{
    ssize_t got = fd < 0 ? -1 : pread(fd, out->wchan, WCHAN_BYTES - 1, 0);
    out->wchan[got > 0 ? got : 0] = 0;
    if (strcmp(out->wchan, "0") == 0)
        out->wchan[0] = 0; /* running: no wait */
}

/* Whether the timer has been re-armed since it fired (the loop's tick ran: the stall is over). */
static int
rearmed(int timer_fd)
{
    struct itimerspec spec;
    if (timerfd_gettime(timer_fd, &spec) != 0)
        return 1;
    return spec.it_value.tv_sec != 0 || spec.it_value.tv_nsec != 0;
}

/* Sleep `ns` unless close() is called first: whether it was. */
static int
stopped_within(int stop_fd, long long ns)
{
    struct pollfd wait = {.fd = stop_fd, .events = POLLIN};
    struct timespec span = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
    int ready = ppoll(&wait, 1, &span, NULL);
    return ready > 0;
}

static void
sample_stall(Sampler *self)
{
    int tids[THREADS_MAX + 1];
    int stat_fds[THREADS_MAX + 1];
    int count;
    pthread_mutex_lock(&self->lock);
    tids[0] = self->loop_tid;
    count = 1;
    for (int i = 0; i < self->tid_count; i++)
        if (self->tids[i] != self->loop_tid)
            tids[count++] = self->tids[i];
    self->wakes++;
    pthread_mutex_unlock(&self->lock);
    for (int i = 0; i < count; i++)
        stat_fds[i] = open_task_file(tids[i], "stat");
    int wchan_fd = open_task_file(tids[0], "wchan");
    for (;;) {
        kernel_sample batch[THREADS_MAX + 1];
        int64_t now = monotonic_ns();
        for (int i = 0; i < count; i++) {
            batch[i].t_ns = now;
            batch[i].tid = tids[i];
            batch[i].wchan[0] = 0;
            read_stat(stat_fds[i], &batch[i]);
        }
        read_wchan(wchan_fd, &batch[0]);
        pthread_mutex_lock(&self->lock);
        for (int i = 0; i < count; i++)
            self->ring[self->written++ % RING_SLOTS] = batch[i];
        pthread_mutex_unlock(&self->lock);
        if (rearmed(self->timer_fd) || stopped_within(self->stop_fd, self->period_ns))
            break;
    }
    for (int i = 0; i < count; i++)
        if (stat_fds[i] >= 0)
            close(stat_fds[i]);
    if (wchan_fd >= 0)
        close(wchan_fd);
}

static void *
sampler_main(void *arg)
{
    Sampler *self = arg;
    /* Named for top -H, perf and scheduler traces, as broker/os_threads.py names the others. */
    pthread_setname_np(pthread_self(), "kernel-sampler");
    struct pollfd fds[2] = {{.fd = self->timer_fd, .events = POLLIN},
                            {.fd = self->stop_fd, .events = POLLIN}};
    for (;;) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (fds[1].revents)
            break;
        if (!(fds[0].revents & POLLIN))
            continue;
        uint64_t expirations;
        if (read(self->timer_fd, &expirations, sizeof expirations) != sizeof expirations)
            continue; /* re-armed between the poll and the read: not overdue after all */
        uint64_t one = 1;
        if (write(self->wake_fd, &one, sizeof one) < 0) {
            /* the counter is full: the watchdog has wake-ups pending anyway */
        }
        sample_stall(self);
    }
    return NULL;
}

static void
sampler_stop(Sampler *self)
{
    if (!self->running)
        return;
    uint64_t one = 1;
    if (write(self->stop_fd, &one, sizeof one) < 0) {
        /* cannot fail for an eventfd below its maximum */
    }
    Py_BEGIN_ALLOW_THREADS
    pthread_join(self->thread, NULL);
    Py_END_ALLOW_THREADS
    self->running = 0;
}

static PyObject *
Sampler_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    (void)args;
    (void)kwargs;
    Sampler *self = (Sampler *)type->tp_alloc(type, 0);
    if (self != NULL)
        self->timer_fd = self->stop_fd = self->wake_fd = -1;
    return (PyObject *)self;
}

static int
Sampler_init(Sampler *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"timer_fd", "loop_tid", "period_ns", NULL};
    int timer_fd, loop_tid;
    long long period_ns;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iiL", keywords, &timer_fd, &loop_tid,
                                     &period_ns))
        return -1;
    if (self->ring != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Sampler is already initialised");
        return -1;
    }
    if (period_ns < PERIOD_NS_MIN) {
        PyErr_Format(PyExc_ValueError, "period_ns=%lld is below %lld", period_ns, PERIOD_NS_MIN);
        return -1;
    }
    self->timer_fd = timer_fd;
    self->loop_tid = loop_tid;
    self->period_ns = period_ns;
    self->ring = PyMem_RawCalloc(RING_SLOTS, sizeof(kernel_sample));
    if (self->ring == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    pthread_mutex_init(&self->lock, NULL);
    self->stop_fd = eventfd(0, EFD_CLOEXEC);
    self->wake_fd = eventfd(0, EFD_CLOEXEC);
    if (self->stop_fd < 0 || self->wake_fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    int error = pthread_create(&self->thread, NULL, sampler_main, self);
    if (error) {
        errno = error;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    self->running = 1;
    return 0;
}

static void
Sampler_dealloc(Sampler *self)
{
    sampler_stop(self);
    if (self->stop_fd >= 0)
        close(self->stop_fd);
    if (self->wake_fd >= 0)
        close(self->wake_fd);
    if (self->ring != NULL) {
        pthread_mutex_destroy(&self->lock);
        PyMem_RawFree(self->ring);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

PyDoc_STRVAR(watch_doc,
"watch(tids, /)\n--\n\n"
"The other threads to sample from the next stall on (kernel thread ids; the loop's is always\n"
"sampled). At most 64; more is a ValueError.");

static PyObject *
Sampler_watch(Sampler *self, PyObject *arg)
{
    PyObject *seq = PySequence_Fast(arg, "watch() takes a sequence of thread ids");
    if (seq == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    if (count > THREADS_MAX) {
        Py_DECREF(seq);
        return PyErr_Format(PyExc_ValueError, "%zd threads to watch: at most %d", count,
                            THREADS_MAX);
    }
    int tids[THREADS_MAX];
    for (Py_ssize_t i = 0; i < count; i++) {
        long tid = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (tid == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return NULL;
        }
        tids[i] = (int)tid;
    }
    Py_DECREF(seq);
    pthread_mutex_lock(&self->lock);
    memcpy(self->tids, tids, (size_t)count * sizeof tids[0]);
    self->tid_count = (int)count;
    pthread_mutex_unlock(&self->lock);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(samples_doc,
"samples(since_ns, /)\n--\n\n"
"The kept samples taken at or after `since_ns` (CLOCK_MONOTONIC ns), oldest first: tuples\n"
"(t_ns, tid, state, cpu, wchan); state '' and cpu -1 where the thread's stat could not be read,\n"
"wchan '' for a thread other than the loop's, or while the loop ran.");

static PyObject *
Sampler_samples(Sampler *self, PyObject *arg)
{
    long long since = PyLong_AsLongLong(arg);
    if (since == -1 && PyErr_Occurred())
        return NULL;
    kernel_sample *copy = PyMem_RawMalloc(RING_SLOTS * sizeof(kernel_sample));
    if (copy == NULL)
        return PyErr_NoMemory();
    size_t count = 0;
    pthread_mutex_lock(&self->lock);
    uint64_t first = self->written > RING_SLOTS ? self->written - RING_SLOTS : 0;
    /* Newest first until one is too old: a stall's samples are the last ones written. */
    for (uint64_t i = self->written; i > first; i--) {
        kernel_sample *sample = &self->ring[(i - 1) % RING_SLOTS];
        if (sample->t_ns < since)
            break;
        copy[count++] = *sample;
    }
    pthread_mutex_unlock(&self->lock);
    PyObject *out = PyList_New((Py_ssize_t)count);
    for (size_t i = 0; out != NULL && i < count; i++) {
        kernel_sample *sample = &copy[count - 1 - i];
        char state[2] = {sample->state, 0};
        PyObject *item = Py_BuildValue("(Lisis)", (long long)sample->t_ns, (int)sample->tid,
                                       state, (int)sample->cpu, sample->wchan);
        if (item == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, item);
    }
    PyMem_RawFree(copy);
    return out;
}

PyDoc_STRVAR(close_doc,
"close()\n--\n\n"
"Stop the sampling thread (waiting for it without the GIL) and wake the watchdog once more, so\n"
"that it sees the monitor's stop. Idempotent.");

static PyObject *
Sampler_close(Sampler *self, PyObject *Py_UNUSED(ignored))
{
    int was_running = self->running;
    sampler_stop(self);
    if (was_running) {
        uint64_t one = 1;
        if (write(self->wake_fd, &one, sizeof one) < 0) {
            /* the watchdog has wake-ups pending */
        }
    }
    Py_RETURN_NONE;
}

static PyObject *
Sampler_get_wakes(Sampler *self, void *Py_UNUSED(closure))
{
    pthread_mutex_lock(&self->lock);
    uint64_t wakes = self->wakes;
    pthread_mutex_unlock(&self->lock);
    return PyLong_FromUnsignedLongLong(wakes);
}

static PyMethodDef Sampler_methods[] = {
    {"watch", (PyCFunction)Sampler_watch, METH_O, watch_doc},
    {"samples", (PyCFunction)Sampler_samples, METH_O, samples_doc},
    {"close", (PyCFunction)Sampler_close, METH_NOARGS, close_doc},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Sampler_members[] = {
    {"wake_fd", T_INT, offsetof(Sampler, wake_fd), READONLY,
     "An eventfd that counts the timer's firings: the Python watchdog reads it to wake."},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Sampler_getset[] = {
    {"wakes", (getter)Sampler_get_wakes, NULL, "How many stalls the thread has sampled.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SamplerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "broker._kernel_sampler.Sampler",
    .tp_doc = PyDoc_STR("Sampler(timer_fd, loop_tid, period_ns): samples the loop thread's and\n"
                        "the watched threads' kernel states while `timer_fd` stays fired."),
    .tp_basicsize = sizeof(Sampler),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Sampler_new,
    .tp_init = (initproc)Sampler_init,
    .tp_dealloc = (destructor)Sampler_dealloc,
    .tp_methods = Sampler_methods,
    .tp_members = Sampler_members,
    .tp_getset = Sampler_getset,
};

static int
sampler_exec(PyObject *module)
{
    if (PyType_Ready(&SamplerType) < 0)
        return -1;
    Py_INCREF(&SamplerType);
    if (PyModule_AddObject(module, "Sampler", (PyObject *)&SamplerType) < 0) {
        Py_DECREF(&SamplerType);
        return -1;
    }
    return 0;
}

static PyModuleDef_Slot sampler_slots[] = {
    {Py_mod_exec, sampler_exec},
    {0, NULL},
};

static struct PyModuleDef sampler_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "broker._kernel_sampler",
    .m_doc = "The loop monitor's GIL-free sampler of threads' kernel states (see the .c file).",
    .m_size = 0,
    .m_slots = sampler_slots,
};

PyMODINIT_FUNC
PyInit__kernel_sampler(void)
{
    return PyModuleDef_Init(&sampler_module);
}
